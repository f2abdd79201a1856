//! Bad input the OpenStack schemas can judge: every constraint of `OpenStackCluster`,
//! `OpenStackMachine` and `OpenStackMachineTemplate` gets proptest-generated edits that break it,
//! sent to a real API server, which must refuse each naming the field
//! (`capi_testing::schema_violations`). The base objects set every field, so that every
//! constraint has something to break.
//!
//! Not covered here: "exactly one of `id` or `filter`" (`minProperties`/`maxProperties`, which
//! the generator does not break; `api_server.rs` sends both cases by hand), and what only the
//! controller can judge (an unknown flavor, a missing credentials Secret: `bad_credentials.rs`,
//! the local-OpenStack tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_testing::TestEnv;
use capi_testing::schema_violations::check_crds_refuse_all;
use serde_json::{Value, json};

/// An `OpenStackMachine` spec with every field set.
fn machine_spec() -> Value {
    json!({
        "providerID": "openstack:///6e1a8b43-8f2d-4f0e-9a6b-2f1e9c2c1a10",
        "flavor": {"filter": {"name": "m1.medium", "tags": ["general"]}},
        "image": {"id": "0b5d3c5e-1f0a-4c1e-8f57-3a4f2b1c9d00"},
        "sshKeyName": "default",
        "ports": [{
            "network": {"filter": {"name": "nodes"}},
            "fixedIPs": [{"subnet": {"id": "subnet-a"}, "ipAddress": "10.6.0.20"}],
            "securityGroups": [{"filter": {"name": "workers"}}],
            "allowedAddressPairs": [{"ipAddress": "10.244.1.0/24", "macAddress": "fa:16:3e:00:00:01"}],
            "nameSuffix": "nodes",
        }],
        "securityGroups": [{"id": "sg-extra"}],
        "serverGroup": {"filter": {"name": "anti-affinity"}},
        "serverMetadata": [{"key": "role", "value": "worker"}],
        "tags": ["team-a"],
        "configDrive": true,
    })
}

/// A valid object of each kind with every field set: the base every edit starts from.
fn base(kind: &str) -> Value {
    let spec = match kind {
        "OpenStackClusterTemplate" => {
            json!({"template": {"metadata": {"labels": {"a": "b"}}, "spec": base("OpenStackCluster")["spec"]}})
        }
        "OpenStackCluster" => json!({
            "identityRef": {"name": "demo-cloud-config", "cloudName": "openstack", "region": "RegionOne"},
            "externalNetwork": {"filter": {"name": "public", "tags": ["external"]}},
            "managedSubnets": [{"cidr": "10.6.0.0/24", "dnsNameservers": ["8.8.8.8"]}],
            "network": {"id": "net-a"},
            "subnets": [{"filter": {"name": "nodes"}}],
            "managedSecurityGroups": {"allowAllInClusterTraffic": true},
            "apiServer": {
                "port": 6443,
                "floatingIP": "172.24.4.10",
                "enableFloatingIP": true,
                "fixedIP": "10.6.0.10",
                "managedLoadBalancer": {"enabled": true, "allowedCIDRs": ["192.168.0.0/16"], "provider": "amphora"},
            },
            "controlPlaneEndpoint": {"host": "172.24.4.10", "port": 6443},
            "controlPlaneAvailabilityZones": ["nova"],
            "tags": ["team-a"],
        }),
        "OpenStackMachine" => machine_spec(),
        "OpenStackMachineTemplate" => json!({"template": {"spec": machine_spec()}}),
        other => panic!("no base object for {other}"),
    };
    json!({"metadata": {"name": "bad-input"}, "spec": spec})
}

#[tokio::test]
async fn the_api_server_refuses_what_the_openstack_schemas_forbid_and_names_the_field() {
    let crds = provider_openstack::api::crds();
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    if let Err(misses) = check_crds_refuse_all(&env.client(), &ns, &crds, base).await {
        panic!("{misses}");
    }
}
