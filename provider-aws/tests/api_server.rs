//! The AWS kinds on a real API server: CAPA-shaped manifests apply and round-trip; what the
//! schema's CEL rules forbid is refused, naming the field and saying why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_testing::TestEnv;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, PostParams};
use provider_aws::api::{AWSCluster, AWSMachine, AWSMachinePool, AWSMachineTemplate};
use serde_json::{Value, json};

fn object<K: serde::de::DeserializeOwned>(kind: &str, name: &str, spec: Value) -> K {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": kind,
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

/// `kind` as the API server sees it, untyped: what the typed client could not even send (an
/// unknown enum value, a missing required field) reaches the schema.
fn raw<K: kube::Resource<DynamicType = ()>>(env: &TestEnv, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(env.client(), ns, &ApiResource::erase::<K>(&()))
}

fn untyped(kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "infrastructure.capi-rs.dev/v1alpha1", "kind": kind,
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

#[tokio::test]
async fn capa_shaped_objects_apply_and_what_the_rules_forbid_is_refused_with_a_reason() {
    let env = TestEnv::start_with_crds(&provider_aws::api::crds())
        .await
        .unwrap();
    let ns = env.namespace().await.unwrap();
    let clusters: Api<AWSCluster> = Api::namespaced(env.client(), &ns);
    let machines = raw::<AWSMachine>(&env, &ns);
    let raw_clusters = raw::<AWSCluster>(&env, &ns);
    let templates: Api<AWSMachineTemplate> = Api::namespaced(env.client(), &ns);

    // As CAPA's cluster templates write them (with this provider's load balancer type).
    let spec = json!({
        "region": "eu-west-1",
        "sshKeyName": "default",
        "controlPlaneLoadBalancer": {"loadBalancerType": "nlb"},
        "network": {"vpc": {"availabilityZoneUsageLimit": 2},
                    "additionalNodeIngressRules": [{"description": "node ports", "protocol": "tcp",
                        "fromPort": 30000, "toPort": 32767, "sourceSecurityGroupRoles": ["lb"]}]},
        "additionalTags": {"environment": "test", "cost center": "a/b+c@d"},
    });
    let stored = clusters
        .create(
            &PostParams::default(),
            &object("AWSCluster", "demo", spec.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        stored.spec,
        object::<AWSCluster>("AWSCluster", "demo", spec).spec,
        "round trip"
    );
    let template = json!({"template": {"spec": {
        "instanceType": "t3.large",
        "iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io",
        "sshKeyName": "default",
        "rootVolume": {"size": 50, "type": "gp3"},
    }}});
    templates
        .create(
            &PostParams::default(),
            &object("AWSMachineTemplate", "workers", template),
        )
        .await
        .unwrap();

    let machine = |extra: Value| {
        let mut spec = json!({"instanceType": "t3.large"});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        spec
    };
    let too_many_tags: serde_json::Map<String, Value> =
        (0..41).map(|i| (format!("tag-{i}"), json!("x"))).collect();
    for (name, spec, path, why) in [
        (
            "both",
            machine(
                json!({"subnet": {"id": "subnet-1", "filters": [{"name": "tag:Name", "values": ["a"]}]}}),
            ),
            "spec.subnet",
            "exactly one of id or filters must be set",
        ),
        (
            "neither",
            machine(json!({"additionalSecurityGroups": [{}]})),
            "spec.additionalSecurityGroups[0]",
            "exactly one of id or filters must be set",
        ),
        (
            "aws-prefix",
            machine(json!({"additionalTags": {"aws:cloudformation:stack-name": "x"}})),
            "spec.additionalTags",
            "tag keys may not start with aws:",
        ),
        (
            "owner-prefix",
            machine(
                json!({"additionalTags": {"sigs.k8s.io/cluster-api-provider-aws/cluster/other": "owned"}}),
            ),
            "spec.additionalTags",
            "tag keys may not start with",
        ),
        (
            "bad-key",
            machine(json!({"additionalTags": {"a*b": "x"}})),
            "spec.additionalTags",
            "tag keys take letters, digits, spaces",
        ),
        (
            "bad-value",
            machine(json!({"additionalTags": {"a": "x*y"}})),
            "spec.additionalTags.a",
            "should match",
        ),
        (
            "too-many",
            machine(json!({"additionalTags": too_many_tags})),
            "spec.additionalTags",
            "must have at most 40 items",
        ),
        (
            "small-root",
            machine(json!({"rootVolume": {"size": 4}})),
            "spec.rootVolume.size",
            "should be greater than or equal to 8",
        ),
        (
            "bad-ami",
            machine(json!({"ami": {"id": "ubuntu"}})),
            "spec.ami.id",
            "should match",
        ),
    ] {
        let error = machines
            .create(&PostParams::default(), &untyped("AWSMachine", name, spec))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(path) && error.contains(why),
            "{name}: {error}"
        );
    }

    let rule = |extra: Value| {
        let mut rule =
            json!({"description": "r", "protocol": "tcp", "fromPort": 443, "toPort": 443});
        if let (Some(rule), Some(extra)) = (rule.as_object_mut(), extra.as_object()) {
            rule.extend(extra.clone());
        }
        rule
    };
    for (name, spec, path, why) in [
        (
            "ports-reversed",
            json!({"region": "eu-west-1", "network": {"additionalControlPlaneIngressRules": [rule(json!({"fromPort": 444}))]}}),
            "spec.network.additionalControlPlaneIngressRules[0]",
            "fromPort and toPort are a port range",
        ),
        (
            "two-sources",
            json!({"region": "eu-west-1", "network": {"additionalNodeIngressRules": [rule(json!({"cidrBlocks": ["0.0.0.0/0"], "sourceSecurityGroupRoles": ["node"]}))]}}),
            "spec.network.additionalNodeIngressRules[0]",
            "cannot be used together",
        ),
        (
            "bastion-override",
            json!({"region": "eu-west-1", "network": {"securityGroupOverrides": {"bastion": "sg-1"}}}),
            "spec.network.securityGroupOverrides",
            "keys are security group roles",
        ),
        (
            "classic-elb",
            json!({"region": "eu-west-1", "controlPlaneLoadBalancer": {"loadBalancerType": "classic"}}),
            "spec.controlPlaneLoadBalancer.loadBalancerType",
            "Unsupported value: \"classic\"",
        ),
        (
            "bad-region",
            json!({"region": "Ireland"}),
            "spec.region",
            "should match",
        ),
        (
            "no-region",
            json!({"sshKeyName": "default"}),
            "spec.region",
            "Required value",
        ),
        (
            "duplicate-subnet",
            json!({"region": "eu-west-1", "network": {"subnets": [
                {"id": "a", "isPublic": true}, {"id": "a", "isPublic": false}]}}),
            "spec.network.subnets[1]",
            "Duplicate value",
        ),
        (
            "unknown-identity",
            json!({"region": "eu-west-1", "identityRef": {"kind": "AWSClusterIdentity", "name": "r"}}),
            "spec.identityRef.kind",
            "Unsupported value",
        ),
    ] {
        let error = raw_clusters
            .create(&PostParams::default(), &untyped("AWSCluster", name, spec))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(path) && error.contains(why),
            "{name}: {error}"
        );
    }

    // A pool as CAPA's machinepool templates write it applies; bounds out of order are refused.
    let pools = raw::<AWSMachinePool>(&env, &ns);
    let pool = json!({"minSize": 1, "maxSize": 10, "availabilityZones": ["eu-west-1a"],
                      "awsLaunchTemplate": {"instanceType": "t3.large",
                                            "iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io"}});
    pools
        .create(
            &PostParams::default(),
            &untyped("AWSMachinePool", "workers", pool),
        )
        .await
        .unwrap();
    for (name, spec, path, why) in [
        (
            "bounds-reversed",
            json!({"minSize": 5, "maxSize": 2, "awsLaunchTemplate": {"instanceType": "t3.large"}}),
            "spec",
            "minSize must not be greater than maxSize",
        ),
        (
            "no-launch-template",
            json!({"minSize": 1, "maxSize": 2}),
            "spec.awsLaunchTemplate",
            "Required value",
        ),
        (
            "unknown-subnet-type",
            json!({"availabilityZoneSubnetType": "dual", "awsLaunchTemplate": {"instanceType": "t3.large"}}),
            "spec.availabilityZoneSubnetType",
            "Unsupported value",
        ),
    ] {
        let error = pools
            .create(
                &PostParams::default(),
                &untyped("AWSMachinePool", name, spec),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(path) && error.contains(why),
            "{name}: {error}"
        );
    }
}
