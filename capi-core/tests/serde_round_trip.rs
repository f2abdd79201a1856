//! Every type survives JSON (and YAML) round trips unchanged, and its wire form uses upstream's
//! field names.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use capi_core::api::*;
use capi_core::condition::ConditionStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::option::of;
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9-]{0,10}[a-z0-9]"
}

fn text() -> BoxedStrategy<String> {
    // Includes YAML 1.1 traps (yes/no/on/0640/~) and unicode.
    prop_oneof![
        "[ -~]{0,20}",
        Just("yes".to_string()),
        Just("0640".to_string()),
        Just("~".to_string()),
        Just("é✓".to_string())
    ]
    .boxed()
}

fn time() -> impl Strategy<Value = Time> {
    (0i64..4_000_000_000)
        .prop_map(|s| Time(jiff::Timestamp::from_second(s).unwrap_or(jiff::Timestamp::UNIX_EPOCH)))
}

fn map() -> impl Strategy<Value = BTreeMap<String, String>> {
    proptest::collection::btree_map("[a-z./-]{1,20}", text(), 0..3)
}

fn reference() -> impl Strategy<Value = ContractVersionedObjectReference> {
    (name(), "[A-Z][a-zA-Z]{0,12}", name())
        .prop_map(|(g, k, n)| ContractVersionedObjectReference::new(g, k, n))
}

fn int_or_string() -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        (0i32..1000).prop_map(IntOrString::Int),
        (0u32..=100).prop_map(|p| IntOrString::String(format!("{p}%")))
    ]
}

fn condition() -> impl Strategy<Value = Condition> {
    (
        name(),
        prop_oneof![Just("True"), Just("False"), Just("Unknown")],
        "[A-Z][a-zA-Z]{0,10}",
        text(),
        of(0i64..100),
        time(),
    )
        .prop_map(
            |(type_, status, reason, message, observed_generation, last_transition_time)| {
                Condition {
                    type_,
                    status: status.to_string(),
                    reason,
                    message,
                    observed_generation,
                    last_transition_time,
                }
            },
        )
}

fn conditions() -> impl Strategy<Value = Vec<Condition>> {
    proptest::collection::vec(condition(), 0..3)
}

fn selector() -> impl Strategy<Value = LabelSelector> {
    proptest::collection::btree_map("[a-z./-]{1,20}", name(), 0..3).prop_map(|labels| {
        LabelSelector {
            match_labels: (!labels.is_empty()).then_some(labels),
            match_expressions: None,
        }
    })
}

fn metadata() -> impl Strategy<Value = ObjectMeta> {
    (name(), of(name()), of(1i64..10)).prop_map(|(name, namespace, generation)| ObjectMeta {
        name: Some(name),
        namespace,
        generation,
        ..ObjectMeta::default()
    })
}

fn address() -> impl Strategy<Value = MachineAddress> {
    (
        prop_oneof![
            Just(MachineAddressType::Hostname),
            Just(MachineAddressType::ExternalIp),
            Just(MachineAddressType::InternalIp),
            Just(MachineAddressType::ExternalDns),
            Just(MachineAddressType::InternalDns)
        ],
        "[0-9.]{1,15}",
    )
        .prop_map(|(type_, address)| MachineAddress { type_, address })
}

fn machine_spec() -> impl Strategy<Value = MachineSpec> {
    (
        name(),
        (of(reference()), of(name())),
        reference(),
        of("v1\\.[0-9]{1,2}\\.[0-9]"),
        of("[a-z]+:///[a-z0-9-]{1,20}"),
        of(name()),
        of(0i32..600),
        of((of(0i32..600), of(0i32..600), of(0i32..600))),
    )
        .prop_map(
            |(
                cluster_name,
                (config_ref, data_secret_name),
                infrastructure_ref,
                version,
                provider_id,
                failure_domain,
                min_ready_seconds,
                deletion,
            )| {
                MachineSpec {
                    cluster_name,
                    bootstrap: Bootstrap {
                        config_ref,
                        data_secret_name,
                    },
                    infrastructure_ref,
                    version,
                    provider_id,
                    failure_domain,
                    min_ready_seconds,
                    deletion: deletion.map(|(a, b, c)| MachineDeletionSpec {
                        node_drain_timeout_seconds: a,
                        node_volume_detach_timeout_seconds: b,
                        node_deletion_timeout_seconds: c,
                    }),
                    readiness_gates: Vec::new(),
                    taints: Vec::new(),
                }
            },
        )
}

fn machine_phase() -> impl Strategy<Value = MachinePhase> {
    prop_oneof![
        Just(MachinePhase::Pending),
        Just(MachinePhase::Provisioning),
        Just(MachinePhase::Provisioned),
        Just(MachinePhase::Running),
        Just(MachinePhase::Updating),
        Just(MachinePhase::Deleting),
        Just(MachinePhase::Deleted),
        Just(MachinePhase::Failed),
        Just(MachinePhase::Unknown)
    ]
}

fn machine() -> impl Strategy<Value = Machine> {
    let status = (
        of((of(any::<bool>()), of(any::<bool>()))),
        of(name()),
        proptest::collection::vec(address(), 0..3),
        of(machine_phase()),
        of(time()),
        of((of(time()), of(time()))),
        of(0i64..100),
        conditions(),
    )
        .prop_map(
            |(init, node, addresses, phase, expiry, deletion, observed_generation, conditions)| {
                MachineStatus {
                    initialization: init.map(|(a, b)| MachineInitializationStatus {
                        infrastructure_provisioned: a,
                        bootstrap_data_secret_created: b,
                    }),
                    node_ref: node.map(|name| MachineNodeReference { name }),
                    addresses,
                    phase,
                    certificates_expiry_date: expiry,
                    deletion: deletion.map(|(a, b)| {
                        Box::new(MachineDeletionStatus {
                            node_drain_start_time: a,
                            wait_for_node_volume_detach_start_time: b,
                            ..MachineDeletionStatus::default()
                        })
                    }),
                    observed_generation,
                    conditions,
                    ..MachineStatus::default()
                }
            },
        );
    (metadata(), machine_spec(), of(status)).prop_map(|(metadata, spec, status)| Machine {
        metadata,
        spec,
        status,
    })
}

fn template() -> impl Strategy<Value = MachineTemplateSpec> {
    (of((map(), map())), machine_spec()).prop_map(|(meta, spec)| MachineTemplateSpec {
        metadata: meta.map(|(labels, annotations)| TemplateMetadata {
            labels,
            annotations,
        }),
        spec,
    })
}

fn deletion_order() -> impl Strategy<Value = MachineSetDeletionSpec> {
    of(prop_oneof![
        Just(MachineSetDeletionOrder::Random),
        Just(MachineSetDeletionOrder::Newest),
        Just(MachineSetDeletionOrder::Oldest)
    ])
    .prop_map(|order| MachineSetDeletionSpec { order })
}

fn replica_counts() -> impl Strategy<Value = [Option<i32>; 4]> {
    [of(0i32..100), of(0i32..100), of(0i32..100), of(0i32..100)]
}

fn machine_set() -> impl Strategy<Value = MachineSet> {
    let spec = (
        name(),
        of(0i32..100),
        selector(),
        template(),
        of(deletion_order()),
    )
        .prop_map(
            |(cluster_name, replicas, selector, template, deletion)| MachineSetSpec {
                cluster_name,
                replicas,
                selector,
                template,
                deletion,
                machine_naming: None,
            },
        );
    let status = (of(name()), replica_counts(), of(0i64..100), conditions()).prop_map(
        |(selector, [r, ready, available, up], g, c)| MachineSetStatus {
            selector,
            replicas: r,
            ready_replicas: ready,
            available_replicas: available,
            up_to_date_replicas: up,
            observed_generation: g,
            conditions: c,
            ..MachineSetStatus::default()
        },
    );
    (metadata(), spec, of(status)).prop_map(|(metadata, spec, status)| MachineSet {
        metadata,
        spec,
        status,
    })
}

fn machine_deployment() -> impl Strategy<Value = MachineDeployment> {
    let rollout = (
        of(time()),
        of((
            any::<bool>(),
            of((of(int_or_string()), of(int_or_string()))),
        )),
    )
        .prop_map(|(after, strategy)| MachineDeploymentRollout {
            after,
            strategy: strategy.map(|(on_delete, rolling)| MachineDeploymentRolloutStrategy {
                type_: if on_delete {
                    RolloutStrategyType::OnDelete
                } else {
                    RolloutStrategyType::RollingUpdate
                },
                rolling_update: rolling.map(|(max_surge, max_unavailable)| RollingUpdate {
                    max_surge,
                    max_unavailable,
                }),
            }),
        });
    let spec = (
        name(),
        of(0i32..100),
        of(rollout),
        selector(),
        template(),
        of(deletion_order()),
        of(of(int_or_string())),
        of(any::<bool>()),
    )
        .prop_map(
            |(
                cluster_name,
                replicas,
                rollout,
                selector,
                template,
                deletion,
                remediation,
                paused,
            )| MachineDeploymentSpec {
                cluster_name,
                replicas,
                rollout,
                selector,
                template,
                deletion,
                remediation: remediation
                    .map(|max_in_flight| MachineDeploymentRemediation { max_in_flight }),
                paused,
                machine_naming: None,
            },
        );
    let phase = prop_oneof![
        Just(MachineDeploymentPhase::ScalingUp),
        Just(MachineDeploymentPhase::ScalingDown),
        Just(MachineDeploymentPhase::Running),
        Just(MachineDeploymentPhase::Failed),
        Just(MachineDeploymentPhase::Unknown)
    ];
    let status = (
        of(name()),
        replica_counts(),
        of(phase),
        of(0i64..100),
        conditions(),
    )
        .prop_map(|(selector, [r, ready, available, up], phase, g, c)| {
            MachineDeploymentStatus {
                selector,
                replicas: r,
                ready_replicas: ready,
                available_replicas: available,
                up_to_date_replicas: up,
                phase,
                observed_generation: g,
                conditions: c,
                ..MachineDeploymentStatus::default()
            }
        });
    (metadata(), spec, of(status)).prop_map(|(metadata, spec, status)| MachineDeployment {
        metadata,
        spec,
        status,
    })
}

fn cluster() -> impl Strategy<Value = Cluster> {
    let ranges = || {
        of(
            proptest::collection::vec("10\\.[0-9]{1,3}\\.0\\.0/16", 0..3)
                .prop_map(|cidr_blocks| NetworkRanges { cidr_blocks }),
        )
    };
    let network = (of(1i32..65535), ranges(), ranges(), of(name())).prop_map(
        |(api_server_port, services, pods, service_domain)| ClusterNetwork {
            api_server_port,
            services,
            pods,
            service_domain,
        },
    );
    let endpoint =
        ("[a-z0-9.]{1,20}", 1i32..65535).prop_map(|(host, port)| ApiEndpoint { host, port });
    let spec = (
        of(any::<bool>()),
        of(network),
        of(endpoint),
        of(reference()),
        of(reference()),
    )
        .prop_map(
            |(
                paused,
                cluster_network,
                control_plane_endpoint,
                control_plane_ref,
                infrastructure_ref,
            )| ClusterSpec {
                paused,
                cluster_network,
                control_plane_endpoint,
                control_plane_ref,
                infrastructure_ref,
                topology: None,
                availability_gates: Vec::new(),
            },
        );
    let summary = || {
        replica_counts().prop_map(|[d, r, ready, up]| ReplicaSummary {
            desired_replicas: d,
            replicas: r,
            ready_replicas: ready,
            available_replicas: None,
            up_to_date_replicas: up,
            versions: Vec::new(),
            upgrade_plan: Vec::new(),
        })
    };
    let domain =
        (name(), of(any::<bool>()), map()).prop_map(|(name, control_plane, attributes)| {
            FailureDomain {
                name,
                control_plane,
                attributes,
            }
        });
    let phase = prop_oneof![
        Just(ClusterPhase::Pending),
        Just(ClusterPhase::Provisioning),
        Just(ClusterPhase::Provisioned),
        Just(ClusterPhase::Deleting),
        Just(ClusterPhase::Failed),
        Just(ClusterPhase::Unknown)
    ];
    let status = (
        of((of(any::<bool>()), of(any::<bool>()))),
        of(summary()),
        of(summary()),
        proptest::collection::vec(domain, 0..3),
        of(phase),
        of(0i64..100),
        conditions(),
    )
        .prop_map(
            |(
                init,
                control_plane,
                workers,
                failure_domains,
                phase,
                observed_generation,
                conditions,
            )| ClusterStatus {
                initialization: init.map(|(a, b)| ClusterInitializationStatus {
                    infrastructure_provisioned: a,
                    control_plane_initialized: b,
                }),
                control_plane,
                workers,
                failure_domains,
                phase,
                observed_generation,
                conditions,
                deprecated: None,
            },
        );
    (metadata(), spec, of(status)).prop_map(|(metadata, spec, status)| Cluster {
        metadata,
        spec,
        status,
    })
}

fn machine_health_check() -> impl Strategy<Value = MachineHealthCheck> {
    let status = || {
        prop_oneof![
            Just(ConditionStatus::True),
            Just(ConditionStatus::False),
            Just(ConditionStatus::Unknown)
        ]
    };
    let node_condition =
        (name(), status(), 0i32..1000).prop_map(|(type_, status, timeout_seconds)| {
            UnhealthyNodeCondition {
                type_,
                status: status.as_str().to_string(),
                timeout_seconds,
            }
        });
    let machine_condition =
        (name(), status(), 0i32..1000).prop_map(|(type_, status, timeout_seconds)| {
            UnhealthyMachineCondition {
                type_,
                status,
                timeout_seconds,
            }
        });
    let checks = (
        of(0i32..1000),
        proptest::collection::vec(node_condition, 0..3),
        proptest::collection::vec(machine_condition, 0..2),
    )
        .prop_map(
            |(
                node_startup_timeout_seconds,
                unhealthy_node_conditions,
                unhealthy_machine_conditions,
            )| MachineHealthCheckChecks {
                node_startup_timeout_seconds,
                unhealthy_node_conditions,
                unhealthy_machine_conditions,
            },
        );
    let trigger = (
        of(int_or_string()),
        of((0u32..5, 5u32..10).prop_map(|(a, b)| format!("[{a}-{b}]"))),
    )
        .prop_map(|(unhealthy_less_than_or_equal_to, unhealthy_in_range)| {
            MachineHealthCheckRemediationTriggerIf {
                unhealthy_less_than_or_equal_to,
                unhealthy_in_range,
            }
        });
    let template_ref =
        ("[A-Z][a-z]{1,10}", name(), "[a-z.]{1,10}/v1").prop_map(|(kind, name, api_version)| {
            MachineHealthCheckRemediationTemplateReference {
                kind,
                name,
                api_version,
            }
        });
    let remediation = (of(trigger), of(template_ref)).prop_map(|(trigger_if, template_ref)| {
        MachineHealthCheckRemediation {
            trigger_if,
            template_ref,
        }
    });
    let spec = (name(), selector(), of(checks), of(remediation)).prop_map(
        |(cluster_name, selector, checks, remediation)| MachineHealthCheckSpec {
            cluster_name,
            selector,
            checks,
            remediation,
        },
    );
    let status = (
        of(0i32..10),
        of(0i32..10),
        of(0i32..10),
        of(0i64..10),
        proptest::collection::vec(name(), 0..3),
        conditions(),
    )
        .prop_map(
            |(
                expected_machines,
                current_healthy,
                remediations_allowed,
                observed_generation,
                targets,
                conditions,
            )| MachineHealthCheckStatus {
                expected_machines,
                current_healthy,
                remediations_allowed,
                observed_generation,
                targets,
                conditions,
                deprecated: None,
            },
        );
    (metadata(), spec, of(status)).prop_map(|(metadata, spec, status)| MachineHealthCheck {
        metadata,
        spec,
        status,
    })
}

/// JSON and YAML round trips, and no snake_case key anywhere outside free-form maps.
fn assert_round_trips<T>(value: &T) -> Result<(), TestCaseError>
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let json = serde_json::to_value(value).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let back: T = serde_json::from_value(json.clone())
        .map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
    prop_assert_eq!(&back, value);

    let yaml = serde_saphyr::to_string(value).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let from_yaml: T =
        serde_saphyr::from_str(&yaml).map_err(|e| TestCaseError::fail(format!("{e}:\n{yaml}")))?;
    prop_assert_eq!(&from_yaml, value, "YAML:\n{}", yaml);

    check_keys(&json, "")
}

fn check_keys(value: &serde_json::Value, path: &str) -> Result<(), TestCaseError> {
    const FREE_FORM: [&str; 4] = ["labels", "annotations", "attributes", "matchLabels"];
    match value {
        serde_json::Value::Object(map) => {
            for (key, child) in map {
                prop_assert!(
                    !key.contains('_'),
                    "snake_case key {path}.{key} on the wire"
                );
                if !FREE_FORM.contains(&key.as_str()) {
                    check_keys(child, &format!("{path}.{key}"))?;
                }
            }
        }
        serde_json::Value::Array(items) => {
            for item in items {
                check_keys(item, path)?;
            }
        }
        _ => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn machine_round_trips(value in machine()) { assert_round_trips(&value)?; }

    #[test]
    fn machine_set_round_trips(value in machine_set()) { assert_round_trips(&value)?; }

    #[test]
    fn machine_deployment_round_trips(value in machine_deployment()) { assert_round_trips(&value)?; }

    #[test]
    fn cluster_round_trips(value in cluster()) { assert_round_trips(&value)?; }

    #[test]
    fn machine_health_check_round_trips(value in machine_health_check()) { assert_round_trips(&value)?; }

    #[test]
    fn provider_id_is_spelled_like_upstream(spec in machine_spec()) {
        let json = serde_json::to_value(&spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(json.get("providerID").is_some(), spec.provider_id.is_some());
    }
}
