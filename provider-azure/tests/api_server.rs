//! The Azure kinds on a real API server: CAPZ-shaped manifests apply and round-trip; what the
//! schema's CEL rules forbid is refused, naming the field and saying why; CAPZ fields this
//! provider does not implement are refused, never dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_testing::TestEnv;
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use provider_azure::api::{AzureCluster, AzureMachineTemplate};
use serde_json::{Value, json};

const SUBSCRIPTION: &str = "5b3ab0a0-7f4c-4b4e-9d8f-1c2d3e4f5a6b";

fn object<K: serde::de::DeserializeOwned>(kind: &str, name: &str, spec: Value) -> K {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": kind,
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

/// Why the API server refuses to create `object`, sent untyped (what the typed client could not
/// even send — an unknown enum value, a field this provider does not have — reaches the schema)
/// and with strict field validation, as `capictl apply` sends it.
async fn refused(env: &TestEnv, ns: &str, object: DynamicObject) -> String {
    let name = object.metadata.name.clone().unwrap_or_default();
    match capi_testing::manifest::create_all(&env.client(), ns, &[object]).await {
        Ok(_) => panic!("{name}: accepted"),
        Err(error) => format!("{error}: {error:?}"),
    }
}

fn untyped(kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": kind,
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

/// `base` with `extra`'s fields added.
fn with(base: Value, extra: Value) -> Value {
    let mut spec = base;
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

#[tokio::test]
async fn capz_shaped_objects_apply_and_what_the_rules_forbid_is_refused_with_a_reason() {
    let env = TestEnv::start_with_crds(&provider_azure::api::crds())
        .await
        .unwrap();
    let ns = env.namespace().await.unwrap();
    let clusters: Api<AzureCluster> = Api::namespaced(env.client(), &ns);
    let templates: Api<AzureMachineTemplate> = Api::namespaced(env.client(), &ns);

    // As CAPZ's cluster template writes them (with this provider's identity reference).
    let spec = json!({
        "subscriptionID": SUBSCRIPTION,
        "location": "westeurope",
        "resourceGroup": "demo",
        "identityRef": {"kind": "Secret", "name": "demo-azure-credentials"},
        "networkSpec": {
            "vnet": {"name": "demo-vnet"},
            "subnets": [{"name": "control-plane-subnet", "role": "control-plane"},
                        {"name": "node-subnet", "role": "node"}],
        },
        "additionalTags": {"environment": "test", "cost center": "a:b+c@d"},
    });
    let stored = clusters
        .create(
            &PostParams::default(),
            &object("AzureCluster", "demo", spec.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        stored.spec,
        object::<AzureCluster>("AzureCluster", "demo", spec).spec,
        "round trip"
    );
    let template = json!({"template": {"spec": {
        "vmSize": "Standard_D2s_v3",
        "osDisk": {"osType": "Linux", "diskSizeGB": 128},
        "dataDisks": [{"nameSuffix": "etcddisk", "diskSizeGB": 256, "lun": 0}],
        "sshPublicKey": "",
    }}});
    // CAPZ's template writes an empty key when none is given: taken as no key.
    templates
        .create(
            &PostParams::default(),
            &object("AzureMachineTemplate", "control-plane", template),
        )
        .await
        .unwrap();

    let machine = |extra: Value| {
        with(
            json!({"vmSize": "Standard_D2s_v3", "osDisk": {"osType": "Linux"}}),
            extra,
        )
    };
    let too_many_tags: serde_json::Map<String, Value> =
        (0..41).map(|i| (format!("tag-{i}"), json!("x"))).collect();
    for (name, spec, path, why) in [
        (
            "two-images",
            machine(
                json!({"image": {"id": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/images/i",
                                     "marketplace": {"publisher": "p", "offer": "o", "sku": "s", "version": "v"}}}),
            ),
            "spec.image",
            "exactly one of id, marketplace or computeGallery must be set",
        ),
        (
            "no-image",
            machine(json!({"image": {}})),
            "spec.image",
            "exactly one of id, marketplace or computeGallery must be set",
        ),
        (
            "same-lun",
            machine(
                json!({"dataDisks": [{"nameSuffix": "a", "diskSizeGB": 8, "lun": 1},
                                         {"nameSuffix": "b", "diskSizeGB": 8, "lun": 1}]}),
            ),
            "spec.dataDisks",
            "data disk LUNs must be unique",
        ),
        (
            "same-disk",
            machine(json!({"dataDisks": [{"nameSuffix": "a", "diskSizeGB": 8},
                                         {"nameSuffix": "a", "diskSizeGB": 16}]})),
            "spec.dataDisks[1]",
            "Duplicate value",
        ),
        (
            "microsoft-tag",
            machine(json!({"additionalTags": {"Microsoft.Owner": "x"}})),
            "spec.additionalTags",
            "tag names may not start with microsoft",
        ),
        (
            "owner-tag",
            machine(
                json!({"additionalTags": {"sigs.k8s.io_cluster-api-provider-azure_cluster_other": "owned"}}),
            ),
            "spec.additionalTags",
            "tag names may not start with",
        ),
        (
            "slash-tag",
            machine(json!({"additionalTags": {"a/b": "x"}})),
            "spec.additionalTags",
            "tag names may not contain",
        ),
        (
            "backslash-tag",
            machine(json!({"additionalTags": {"a\\b": "x"}})),
            "spec.additionalTags",
            "tag names may not contain",
        ),
        (
            "too-many-tags",
            machine(json!({"additionalTags": too_many_tags})),
            "spec.additionalTags",
            "must have at most 40 items",
        ),
        (
            "windows",
            machine(json!({"osDisk": {"osType": "Windows"}})),
            "spec.osDisk.osType",
            "Unsupported value: \"Windows\"",
        ),
        (
            "ultra-os-disk",
            machine(
                json!({"osDisk": {"osType": "Linux", "managedDisk": {"storageAccountType": "UltraSSD_LRS"}}}),
            ),
            "spec.osDisk.managedDisk.storageAccountType",
            "Unsupported value",
        ),
        (
            "managed-identity",
            machine(json!({"identity": "UserAssigned"})),
            "spec.identity",
            "unknown field",
        ),
        (
            "bad-key",
            machine(json!({"sshPublicKey": "ssh-ed25519 AAAA"})),
            "spec.sshPublicKey",
            "should match",
        ),
        (
            "no-os-disk",
            json!({"vmSize": "Standard_D2s_v3"}),
            "spec.osDisk",
            "Required value",
        ),
    ] {
        let error = refused(&env, &ns, untyped("AzureMachine", name, spec)).await;
        assert!(
            error.contains(path) && error.contains(why),
            "{name}: {error}"
        );
    }

    // A pool as CAPZ's machinepool flavor writes it applies; what this provider does not
    // implement is refused, never dropped.
    let pool_spec = json!({
        "location": "westeurope",
        "template": {"vmSize": "Standard_D2s_v3", "osDisk": {"osType": "Linux", "diskSizeGB": 30},
                     "sshPublicKey": ""},
    });
    let pools: Api<provider_azure::api::AzureMachinePool> = Api::namespaced(env.client(), &ns);
    let stored = pools
        .create(
            &PostParams::default(),
            &object("AzureMachinePool", "workers", pool_spec.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        stored.spec,
        object::<provider_azure::api::AzureMachinePool>("AzureMachinePool", "workers", pool_spec)
            .spec,
        "round trip"
    );
    let pool = |extra: Value| {
        with(
            json!({"template": {"vmSize": "Standard_D2s_v3", "osDisk": {"osType": "Linux"}}}),
            extra,
        )
    };
    for (name, spec, path, why) in [
        (
            "uniform",
            pool(json!({"orchestrationMode": "Uniform"})),
            "spec.orchestrationMode",
            "Unsupported value: \"Uniform\"",
        ),
        (
            "strategy",
            pool(json!({"strategy": {"type": "RollingUpdate"}})),
            "spec.strategy",
            "unknown field",
        ),
        (
            "data-disks",
            pool(
                json!({"template": {"vmSize": "Standard_D2s_v3", "osDisk": {"osType": "Linux"},
                                     "dataDisks": [{"nameSuffix": "a", "diskSizeGB": 8}]}}),
            ),
            "spec.template.dataDisks",
            "unknown field",
        ),
        (
            "bad-location",
            pool(json!({"location": "West Europe"})),
            "spec.location",
            "should match",
        ),
    ] {
        let error = refused(&env, &ns, untyped("AzureMachinePool", name, spec)).await;
        assert!(
            error.contains(path) && error.contains(why),
            "{name}: {error}"
        );
    }

    let cluster = |extra: Value| {
        with(
            json!({"subscriptionID": SUBSCRIPTION, "location": "westeurope"}),
            extra,
        )
    };
    let rule = |extra: Value| {
        with(
            json!({"name": "allow_x", "description": "x", "protocol": "Tcp", "priority": 2300}),
            extra,
        )
    };
    for (name, spec, path, why) in [
        (
            "two-sources",
            cluster(
                json!({"networkSpec": {"subnets": [{"name": "n", "role": "node",
                "securityGroup": {"securityRules": [rule(json!({"source": "*", "sources": ["10.0.0.0/8"]}))]}}]}}),
            ),
            "spec.networkSpec.subnets[0].securityGroup.securityRules[0]",
            "source and sources cannot be used together",
        ),
        (
            "two-node-subnets",
            cluster(
                json!({"networkSpec": {"subnets": [{"name": "a", "role": "node"},
                                                        {"name": "b", "role": "node"}]}}),
            ),
            "spec.networkSpec.subnets",
            "at most one subnet per role",
        ),
        (
            "low-priority",
            cluster(
                json!({"networkSpec": {"subnets": [{"name": "n", "role": "node",
                "securityGroup": {"securityRules": [rule(json!({"priority": 99}))]}}]}}),
            ),
            "spec.networkSpec.subnets[0].securityGroup.securityRules[0].priority",
            "should be greater than or equal to 100",
        ),
        (
            "bastion-subnet",
            cluster(json!({"networkSpec": {"subnets": [{"name": "b", "role": "bastion"}]}})),
            "spec.networkSpec.subnets[0].role",
            "Unsupported value: \"bastion\"",
        ),
        (
            "internal-lb",
            cluster(json!({"networkSpec": {"apiServerLB": {"type": "Internal"}}})),
            "spec.networkSpec.apiServerLB.type",
            "Unsupported value: \"Internal\"",
        ),
        (
            "long-idle",
            cluster(json!({"networkSpec": {"apiServerLB": {"idleTimeoutInMinutes": 31}}})),
            "spec.networkSpec.apiServerLB.idleTimeoutInMinutes",
            "should be less than or equal to 30",
        ),
        (
            "secret-elsewhere",
            cluster(json!({"identityRef": {"kind": "Secret", "name": "x", "namespace": "ops"}})),
            "spec.identityRef",
            "namespace may only be set for an AzureClusterIdentity",
        ),
        (
            "bad-subscription",
            cluster(json!({"subscriptionID": "my-subscription"})),
            "spec.subscriptionID",
            "should",
        ),
        (
            "bad-location",
            cluster(json!({"location": "West Europe"})),
            "spec.location",
            "should match",
        ),
        (
            "no-location",
            json!({"subscriptionID": SUBSCRIPTION}),
            "spec.location",
            "Required value",
        ),
        (
            "bad-resource-group",
            cluster(json!({"resourceGroup": "a/b"})),
            "spec.resourceGroup",
            "should match",
        ),
        (
            "bastion",
            cluster(json!({"bastionSpec": {"azureBastion": {}}})),
            "spec.bastionSpec",
            "unknown field",
        ),
    ] {
        let error = refused(&env, &ns, untyped("AzureCluster", name, spec)).await;
        assert!(
            error.contains(path) && error.contains(why),
            "{name}: {error}"
        );
    }
}
