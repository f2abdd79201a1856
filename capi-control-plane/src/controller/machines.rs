//! The control plane's machines: what the decisions need to know of each (up to date? healthy?),
//! and creating one — Machine first, then its KubeadmConfig and its infrastructure machine, owned
//! by it, so that a crash in between leaves a Machine that the next pass completes.

use std::collections::BTreeMap;

use capi_bootstrap::api::{KubeadmConfig, KubeadmConfigSpec};
use capi_controllers::references::{CLONED_FROM_GROUP_KIND, CLONED_FROM_NAME, instance_of};
use capi_core::api::{Bootstrap, Cluster, ContractVersionedObjectReference, Machine, MachineSpec};
use capi_core::condition;
use capi_core::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DynamicObject, PostParams};
use kube::{Api, Resource, ResourceExt};

use super::{CLEANUP_HOOK, ControlPlaneController};
use crate::api::KubeadmControlPlane;
use crate::components::{self, Judgement};
use crate::etcd::EtcdClusterStatus;
use crate::remediation::{FOR_ANNOTATION, RemediationData};
use crate::scale::MachineFacts;
use capi_runtime::ReconcileError;

/// The labels of every machine of `kcp`, as upstream sets them.
pub(super) fn machine_labels(kcp: &KubeadmControlPlane, cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::CLUSTER_NAME.to_string(), cluster.to_string()),
        (labels::MACHINE_CONTROL_PLANE.to_string(), String::new()),
        (
            labels::MACHINE_CONTROL_PLANE_NAME.to_string(),
            kcp.name_any(),
        ),
    ])
}

/// The label selector of those labels, for `status.selector` and for listing.
pub(super) fn selector(kcp: &KubeadmControlPlane, cluster: &str) -> String {
    machine_labels(kcp, cluster)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The name of a new machine: `spec.machineNaming.template` (default
/// `{{ .kubeadmControlPlane.name }}-{{ .random }}`) with `.cluster.name`,
/// `.kubeadmControlPlane.name` and `.random` (five lowercase characters) filled in.
pub(super) fn machine_name(kcp: &KubeadmControlPlane, cluster: &str) -> Result<String, String> {
    let template = kcp
        .spec
        .machine_naming
        .as_ref()
        .and_then(|n| n.template.as_deref())
        .unwrap_or("{{ .kubeadmControlPlane.name }}-{{ .random }}");
    let name = kcp.name_any();
    capi_controllers::naming::machine_name(
        template,
        &[
            (".cluster.name", cluster),
            (".kubeadmControlPlane.name", &name),
        ],
    )
}

/// What a machine is, for the decisions.
pub(super) struct Observed<'a> {
    pub(super) machine: &'a Machine,
    pub(super) config: Option<&'a KubeadmConfig>,
    pub(super) infrastructure: Option<&'a DynamicObject>,
}

/// Why `observed` must be replaced, or `None` when it matches the control plane's spec.
pub(super) fn outdated(
    kcp: &KubeadmControlPlane,
    observed: &Observed<'_>,
    now: jiff::Timestamp,
) -> Option<String> {
    let machine = observed.machine;
    let spec = &kcp.spec;
    if machine.spec.version.as_deref() != Some(spec.version.as_str()) {
        return Some(format!(
            "version {} (wanted {})",
            machine.spec.version.as_deref().unwrap_or("unset"),
            spec.version
        ));
    }
    let template = &spec.machine_template.spec.infrastructure_ref;
    if let Some(infrastructure) = observed.infrastructure {
        let annotations = infrastructure.annotations();
        let group_kind = format!("{}.{}", template.kind, template.api_group);
        if annotations.get(CLONED_FROM_NAME) != Some(&template.name)
            || annotations.get(CLONED_FROM_GROUP_KIND) != Some(&group_kind)
        {
            return Some(format!(
                "infrastructure not cloned from {} {}",
                template.kind, template.name
            ));
        }
    }
    if let Some(config) = observed.config
        && !same_kubeadm_config(&config.spec, spec.kubeadm_config_spec.as_ref())
    {
        return Some("kubeadm configuration changed".into());
    }
    let created = machine.metadata.creation_timestamp.as_ref().map(|t| t.0);
    if let Some(after) = spec.rollout.as_ref().and_then(|r| r.after.as_ref())
        && after.0 <= now
        && created.is_some_and(|c| c < after.0)
    {
        return Some(format!("created before rollout.after ({})", after.0));
    }
    if let Some(days) = spec
        .rollout
        .as_ref()
        .and_then(|r| r.before.as_ref())
        .and_then(|b| b.certificates_expiry_days)
        && let Some(expiry) = machine
            .status
            .as_ref()
            .and_then(|s| s.certificates_expiry_date.as_ref())
    {
        let threshold = now + jiff::SignedDuration::from_hours(24 * i64::from(days));
        if expiry.0 <= threshold {
            return Some(format!(
                "certificates expire at {} (within {days} days)",
                expiry.0
            ));
        }
    }
    None
}

/// Whether a machine's KubeadmConfig matches the control plane's `kubeadmConfigSpec`, ignoring
/// that a machine carries either the init or the join configuration.
fn same_kubeadm_config(machine: &KubeadmConfigSpec, wanted: Option<&KubeadmConfigSpec>) -> bool {
    let wanted = wanted.cloned().unwrap_or_default();
    let mut machine = machine.clone();
    machine.init_configuration = wanted.init_configuration.clone();
    machine.join_configuration = wanted.join_configuration.clone();
    serde_json::to_value(&machine).ok() == serde_json::to_value(&wanted).ok()
}

/// The node name of a machine, once it has one.
pub(super) fn node_name(machine: &Machine) -> Option<&str> {
    machine
        .status
        .as_ref()
        .and_then(|s| s.node_ref.as_ref())
        .map(|n| n.name.as_str())
}

/// The decisions' view of a machine. Healthy means: it has a node that is ready, and (when etcd
/// was read) its etcd member exists and is healthy.
/// What the decisions know of `machine`: `etcd` is what etcd said (once initialized), `judged`
/// its components' and etcd member's conditions this pass (empty when not judged).
pub(super) fn facts(
    machine: &Machine,
    up_to_date: bool,
    etcd: Option<&EtcdClusterStatus>,
    judged: &[Judgement],
) -> MachineFacts {
    let conditions = machine
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let node_ready = condition::get(conditions, condition::NODE_READY).map(|c| c.status.as_str());
    let node = node_name(machine);
    let member_healthy = match (etcd, node) {
        (Some(etcd), Some(node)) => etcd.member(node).map(|m| m.healthy),
        _ => None,
    };
    let healthy = node.is_some()
        && node_ready == Some("True")
        && (etcd.is_none() || member_healthy == Some(true))
        && components::all_healthy(judged);
    MachineFacts {
        name: machine.name_any(),
        failure_domain: machine.spec.failure_domain.clone(),
        created: machine
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        up_to_date,
        deleting: machine.metadata.deletion_timestamp.is_some(),
        marked_for_deletion: machine.annotations().contains_key(labels::DELETE_MACHINE),
        healthy,
        components_failing: node_ready == Some("False")
            || member_healthy == Some(false)
            || components::any_failing(judged),
    }
}

/// The KubeadmConfig spec of a machine: the control plane's, with the init configuration for the
/// first machine and the join configuration for the others.
fn config_spec(kcp: &KubeadmControlPlane, init: bool) -> KubeadmConfigSpec {
    let mut spec = kcp.spec.kubeadm_config_spec.clone().unwrap_or_default();
    if init {
        spec.join_configuration = None;
    } else {
        spec.init_configuration = None;
        // `controlPlane` marks a control-plane join (and keeps the object non-empty, as the
        // schema wants), as upstream's control plane provider writes it.
        spec.join_configuration
            .get_or_insert_with(Default::default)
            .control_plane
            .get_or_insert_with(Default::default);
    }
    spec
}

/// Creates a machine of `kcp` in `failure_domain`: the Machine (with the cleanup hook), then its
/// KubeadmConfig and infrastructure machine. Returns its name.
/// The machine [`create`] makes.
pub(super) struct NewMachine<'a> {
    /// Its name.
    pub(super) name: &'a str,
    /// Its failure domain.
    pub(super) failure_domain: Option<String>,
    /// The first machine: `kubeadm init` rather than `join --control-plane`.
    pub(super) init: bool,
    /// The remediation it replaces a machine for, if it does.
    pub(super) remediation_for: Option<&'a RemediationData>,
}

pub(super) async fn create(
    kcp: &KubeadmControlPlane,
    cluster: &Cluster,
    new: &NewMachine<'_>,
    client: &kube::Client,
    state: &ControlPlaneController,
) -> Result<(), ReconcileError> {
    let NewMachine {
        name,
        failure_domain,
        init,
        remediation_for,
    } = new;
    let (name, init) = (*name, *init);
    let namespace = kcp.namespace().unwrap_or_default();
    let cluster_name = cluster.name_any();
    let template = &kcp.spec.machine_template;
    let mut labels_of_machine = template
        .metadata
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default();
    labels_of_machine.extend(machine_labels(kcp, &cluster_name));
    let mut annotations = template
        .metadata
        .as_ref()
        .map(|m| m.annotations.clone())
        .unwrap_or_default();
    annotations.insert(CLEANUP_HOOK.to_string(), String::new());
    if let Some(record) = remediation_for {
        annotations.insert(FOR_ANNOTATION.to_string(), record.to_annotation());
    }
    let config_ref = ContractVersionedObjectReference::new(
        KubeadmConfig::group(&()).as_ref(),
        KubeadmConfig::kind(&()).as_ref(),
        name,
    );
    let machine = Machine {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.clone()),
            labels: Some(labels_of_machine),
            annotations: Some(annotations),
            finalizers: Some(vec![labels::MACHINE_FINALIZER.to_string()]),
            owner_references: kcp.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: MachineSpec {
            cluster_name: cluster_name.clone(),
            bootstrap: Bootstrap {
                config_ref: Some(config_ref),
                data_secret_name: None,
            },
            infrastructure_ref: instance_of(&template.spec.infrastructure_ref, name),
            version: Some(kcp.spec.version.clone()),
            failure_domain: failure_domain.clone(),
            deletion: template.spec.deletion.clone(),
            ..MachineSpec::default()
        },
        status: None,
    };
    // Expected before it is sent: a pass that starts while the answer is on its way waits for
    // the watch to show it.
    let owner = kcp.uid().unwrap_or_default();
    state.expectations.created(&owner, name);
    let created = Api::<Machine>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &machine)
        .await
        .inspect_err(|error| {
            // One that exists was made by a pass whose answer was lost: it will show.
            if !matches!(error, kube::Error::Api(status) if status.is_already_exists()) {
                state.expectations.create_failed(&owner, name);
            }
        })?;
    complete(kcp, &created, init, Made::Now, client, state).await
}

/// Whether a machine's KubeadmConfig and infrastructure machine may exist already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Made {
    /// The machine was created by this pass, so they are created without a read first: a create
    /// that finds one (a leftover of that name) leaves it alone, as a read would have.
    Now,
    /// An earlier pass made the machine (its answer, or its next creates, may have been lost):
    /// each is read first and created only when missing.
    Earlier,
}

/// Creates what `machine` lacks of its KubeadmConfig and infrastructure machine (both are
/// created once; one that exists is left alone).
pub(super) async fn complete(
    kcp: &KubeadmControlPlane,
    machine: &Machine,
    init: bool,
    made: Made,
    client: &kube::Client,
    state: &ControlPlaneController,
) -> Result<(), ReconcileError> {
    let namespace = machine.namespace().unwrap_or_default();
    let name = machine.name_any();
    // The machine's labels (the machine template's, then the control plane's own), as upstream
    // labels a control-plane machine's config and infrastructure machine.
    let owned_labels = machine.labels().clone();
    let configs: Api<KubeadmConfig> = Api::namespaced(client.clone(), &namespace);
    if made == Made::Now || configs.get_opt(&name).await?.is_none() {
        let mut config = KubeadmConfig::new(&name, config_spec(kcp, init));
        config.metadata.namespace = Some(namespace.clone());
        config.metadata.labels = Some(owned_labels.clone());
        config.metadata.owner_references = machine.controller_owner_ref(&()).map(|mut o| {
            o.block_owner_deletion = Some(true);
            vec![o]
        });
        match configs.create(&PostParams::default(), &config).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(error) => return Err(error.into()),
        }
    }
    let template = &kcp.spec.machine_template.spec.infrastructure_ref;
    let target = &machine.spec.infrastructure_ref;
    if made == Made::Now
        || state
            .references
            .get_fresh(target, &namespace)
            .await?
            .is_none()
    {
        state
            .references
            .clone_template(
                template,
                target,
                &namespace,
                &owned_labels,
                machine.controller_owner_ref(&()),
            )
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kcp(naming: Option<&str>) -> KubeadmControlPlane {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
            "kind": "KubeadmControlPlane",
            "metadata": {"name": "demo-cp", "namespace": "default"},
            "spec": {
                "version": "v1.34.1",
                "machineTemplate": {"spec": {"infrastructureRef": {
                    "apiGroup": "infrastructure.capi-rs.dev", "kind": "InMemoryMachineTemplate", "name": "t"}}},
                "machineNaming": naming.map(|t| serde_json::json!({"template": t})),
            },
        }))
        .unwrap()
    }

    #[test]
    fn machine_names_follow_the_naming_template() {
        let name = machine_name(&kcp(None), "demo").unwrap();
        assert!(name.starts_with("demo-cp-") && name.len() == "demo-cp-".len() + 5);
        let name = machine_name(&kcp(Some("{{ .cluster.name }}-cp-{{.random}}")), "demo").unwrap();
        assert!(name.starts_with("demo-cp-"), "{name}");
        let error = machine_name(&kcp(Some("{{ .machine.name }}-{{ .random }}")), "demo");
        assert!(
            error
                .unwrap_err()
                .contains("unknown field \".machine.name\"")
        );
        let long = format!("{}-{{{{ .random }}}}", "x".repeat(60));
        assert!(machine_name(&kcp(Some(&long)), "demo").is_err());
    }

    #[test]
    fn the_selector_names_the_cluster_and_the_control_plane() {
        assert_eq!(
            selector(&kcp(None), "demo"),
            "cluster.x-k8s.io/cluster-name=demo,cluster.x-k8s.io/control-plane=,cluster.x-k8s.io/control-plane-name=demo-cp"
        );
    }

    #[test]
    fn a_machine_is_outdated_by_version_kubeadm_config_rollout_after_and_expiring_certificates() {
        let mut control_plane = kcp(None);
        let mut machine = Machine::default();
        machine.spec.version = Some("v1.34.1".into());
        machine.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:00:00Z".parse().unwrap(),
            ));
        let now: jiff::Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        let config = KubeadmConfig::new("m", config_spec(&control_plane, false));
        let observed = Observed {
            machine: &machine,
            config: Some(&config),
            infrastructure: None,
        };
        assert_eq!(
            outdated(&control_plane, &observed, now),
            None,
            "join vs init does not count"
        );

        control_plane.spec.version = "v1.35.0".into();
        assert!(
            outdated(&control_plane, &observed, now)
                .unwrap()
                .contains("version v1.34.1")
        );
        control_plane.spec.version = "v1.34.1".into();

        let mut changed = control_plane.clone();
        changed.spec.kubeadm_config_spec = Some(
            serde_json::from_value(serde_json::json!({
                "preKubeadmCommands": ["echo hello"]
            }))
            .unwrap(),
        );
        assert_eq!(
            outdated(&changed, &observed, now).as_deref(),
            Some("kubeadm configuration changed")
        );

        let mut after = control_plane.clone();
        after.spec.rollout = Some(
            serde_json::from_value(serde_json::json!({"after": "2026-03-01T00:00:00Z"})).unwrap(),
        );
        assert!(
            outdated(&after, &observed, now)
                .unwrap()
                .contains("rollout.after")
        );
        let early: jiff::Timestamp = "2026-02-01T00:00:00Z".parse().unwrap();
        assert_eq!(
            outdated(&after, &observed, early),
            None,
            "rollout.after in the future"
        );

        let mut expiring = control_plane.clone();
        expiring.spec.rollout = Some(
            serde_json::from_value(serde_json::json!({"before": {"certificatesExpiryDays": 21}}))
                .unwrap(),
        );
        machine.status = Some(
            serde_json::from_value(
                serde_json::json!({"certificatesExpiryDate": "2026-06-10T00:00:00Z"}),
            )
            .unwrap(),
        );
        let observed = Observed {
            machine: &machine,
            config: Some(&config),
            infrastructure: None,
        };
        assert!(
            outdated(&expiring, &observed, now)
                .unwrap()
                .contains("certificates expire")
        );
    }
}
