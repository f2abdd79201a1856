//! The OpenStack kinds on a real API server: CAPO-shaped manifests apply and round-trip; what the
//! schema can reject is rejected with a field path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_testing::TestEnv;
use kube::Api;
use kube::api::PostParams;
use provider_openstack::api::{OpenStackCluster, OpenStackMachine, OpenStackMachineTemplate};
use serde_json::{Value, json};

fn cluster(spec: Value) -> OpenStackCluster {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackCluster",
        "metadata": {"name": "demo"}, "spec": spec
    }))
    .unwrap()
}

fn machine(name: &str, spec: Value) -> OpenStackMachine {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackMachine",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

#[tokio::test]
async fn capo_shaped_objects_apply_and_bad_ones_are_rejected_with_a_field_path() {
    let env = TestEnv::start_with_crds(&provider_openstack::api::crds())
        .await
        .unwrap();
    let ns = env.namespace().await.unwrap();
    let clusters: Api<OpenStackCluster> = Api::namespaced(env.client(), &ns);
    let machines: Api<OpenStackMachine> = Api::namespaced(env.client(), &ns);

    let spec = json!({
        "identityRef": {"name": "demo-cloud-config", "cloudName": "openstack"},
        "externalNetwork": {"filter": {"name": "public"}},
        "managedSubnets": [{"cidr": "10.6.0.0/24", "dnsNameservers": ["8.8.8.8"]}],
        "managedSecurityGroups": {"allowAllInClusterTraffic": true},
        "apiServer": {"managedLoadBalancer": {"enabled": true, "allowedCIDRs": ["192.168.0.0/16"]}},
        "controlPlaneAvailabilityZones": ["nova"],
    });
    let stored = clusters
        .create(&PostParams::default(), &cluster(spec.clone()))
        .await
        .unwrap();
    assert_eq!(stored.spec, cluster(spec).spec, "round trip");

    let good = json!({
        "flavor": {"filter": {"name": "m1.medium"}},
        "image": {"id": "6e1a8b43-8f2d-4f0e-9a6b-2f1e9c2c1a10"},
        "sshKeyName": "default",
        "ports": [{"allowedAddressPairs": [{"ipAddress": "10.244.1.0/24"}],
                   "fixedIPs": [{"subnet": {"filter": {"name": "nodes"}}}]}],
        "serverMetadata": [{"key": "role", "value": "worker"}],
    });
    machines
        .create(&PostParams::default(), &machine("good", good))
        .await
        .unwrap();

    for (name, spec, path) in [
        (
            "both",
            json!({"flavor": {"id": "x", "filter": {"name": "m1"}}, "image": {"id": "y"}}),
            "spec.flavor",
        ),
        (
            "neither",
            json!({"flavor": {"id": "x"}, "image": {}}),
            "spec.image",
        ),
        (
            "bad-suffix",
            json!({"flavor": {"id": "x"}, "image": {"id": "y"}, "ports": [{"nameSuffix": "Not_A_Label"}]}),
            "spec.ports[0].nameSuffix",
        ),
    ] {
        let error = machines
            .create(&PostParams::default(), &machine(name, spec))
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(path), "{name}: {error}");
        if name != "bad-suffix" {
            assert!(
                error.contains("exactly one of id or filter must be set"),
                "{name}: the CEL rule's message: {error}"
            );
        }
    }
    let bad_cidr = json!({
        "identityRef": {"name": "c", "cloudName": "openstack"},
        "managedSubnets": [{"cidr": "10.6.0.0/33"}],
    });
    let mut other = cluster(bad_cidr);
    other.metadata.name = Some("bad".into());
    let error = clusters
        .create(&PostParams::default(), &other)
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("spec.managedSubnets[0].cidr"), "{error}");

    let templates: Api<OpenStackMachineTemplate> = Api::namespaced(env.client(), &ns);
    let template: OpenStackMachineTemplate = serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": "OpenStackMachineTemplate",
        "metadata": {"name": "workers"},
        "spec": {"template": {"spec": {"flavor": {"filter": {"name": "m1.small"}}, "image": {"filter": {"name": "ubuntu-2404-kube-v1.33"}}}}}
    }))
    .unwrap();
    templates
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
}
