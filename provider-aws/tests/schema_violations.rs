//! Bad input the AWS schemas can judge: every constraint of `AWSCluster`, `AWSClusterTemplate`,
//! `AWSMachine`, `AWSMachineTemplate`, `AWSMachinePool` and the three identity kinds gets proptest-generated edits that break it, sent to a
//! real API server, which must refuse each naming the field
//! (`capi_testing::schema_violations`). The base objects set every field, so that every
//! constraint has something to break.
//!
//! Not covered here: the CEL rules (exactly one of `id` or `filters`, tag keys, port ranges,
//! one kind of source per rule: `api_server.rs` sends each by hand), and what only the
//! controller can judge (an unknown AMI or instance type, missing credentials).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_testing::TestEnv;
use capi_testing::schema_violations::check_crds_refuse_all;
use serde_json::{Value, json};

/// An `AWSMachine` spec with every field set.
fn machine_spec() -> Value {
    json!({
        "providerID": "aws:///eu-west-1a/i-0123456789abcdef0",
        "ami": {"id": "ami-0123456789abcdef0"},
        "imageLookupFormat": "capa-ami-{{.BaseOS}}-?{{.K8sVersion}}-*",
        "imageLookupOrg": "258751437250",
        "imageLookupBaseOS": "ubuntu-24.04",
        "instanceType": "m6i.large",
        "additionalTags": {"team": "a"},
        "iamInstanceProfile": "nodes.cluster-api-provider-aws.sigs.k8s.io",
        "publicIP": false,
        "additionalSecurityGroups": [{"id": "sg-0123456789abcdef0"}],
        "subnet": {"filters": [{"name": "tag:Name", "values": ["demo-subnet-private-eu-west-1a"]}]},
        "sshKeyName": "default",
        "rootVolume": {"deviceName": "/dev/sda1", "size": 32, "type": "gp3", "iops": 3000,
                       "throughput": 125, "encrypted": true, "encryptionKey": "alias/ebs"},
        "spotMarketOptions": {"maxPrice": "0.05"},
        "cloudInit": {"insecureSkipSecretsManager": false, "secureSecretsBackend": "secrets-manager"},
    })
}

/// An `AWSCluster` spec with every field set.
fn cluster_spec() -> Value {
    let rule = json!({"description": "bgp", "protocol": "tcp", "fromPort": 179, "toPort": 179,
                      "cidrBlocks": ["10.0.0.0/16"]});
    json!({
        "region": "eu-west-1",
        "network": {
            "vpc": {"cidrBlock": "10.0.0.0/16", "availabilityZoneUsageLimit": 3,
                    "availabilityZoneSelection": "Ordered", "tags": {"team": "a"}},
            "subnets": [{"id": "demo-public-a", "cidrBlock": "10.0.0.0/24",
                         "availabilityZone": "eu-west-1a", "isPublic": true,
                         "routeTableId": "rtb-0123", "natGatewayId": "nat-0123",
                         "tags": {"team": "a"}}],
            "cni": {"cniIngressRules": [{"description": "bgp", "protocol": "tcp", "fromPort": 179, "toPort": 179}]},
            "securityGroupOverrides": {"lb": "sg-0123456789abcdef0"},
            "additionalControlPlaneIngressRules": [rule.clone()],
            "additionalNodeIngressRules": [rule.clone()],
        },
        "identityRef": {"kind": "Secret", "name": "demo-aws-credentials"},
        "sshKeyName": "default",
        "controlPlaneEndpoint": {"host": "demo-apiserver.elb.amazonaws.com", "port": 6443},
        "additionalTags": {"team": "a"},
        "controlPlaneLoadBalancer": {
            "name": "demo-apiserver", "scheme": "internet-facing", "crossZoneLoadBalancing": true,
            "subnets": ["subnet-0123"], "additionalSecurityGroups": ["sg-0123"],
            "ingressRules": [rule], "loadBalancerType": "nlb", "preserveClientIP": true,
        },
        "imageLookupFormat": "capa-ami-{{.BaseOS}}-?{{.K8sVersion}}-*",
        "imageLookupOrg": "258751437250",
        "imageLookupBaseOS": "ubuntu-24.04",
    })
}

/// A valid object of each kind with every field set: the base every edit starts from.
fn base(kind: &str) -> Value {
    let spec = match kind {
        "AWSCluster" => cluster_spec(),
        "AWSClusterTemplate" => {
            json!({"template": {"metadata": {"labels": {"a": "b"}}, "spec": cluster_spec()}})
        }
        "AWSMachine" => machine_spec(),
        "AWSMachineTemplate" => {
            json!({"template": {"metadata": {"labels": {"a": "b"}}, "spec": machine_spec()}})
        }
        "AWSMachinePool" => {
            let machine = machine_spec();
            let mut template = json!({});
            for field in [
                "ami",
                "imageLookupFormat",
                "imageLookupOrg",
                "imageLookupBaseOS",
                "instanceType",
                "iamInstanceProfile",
                "sshKeyName",
                "rootVolume",
                "additionalSecurityGroups",
                "spotMarketOptions",
                "instanceMetadataOptions",
            ] {
                if !machine[field].is_null() {
                    template[field] = machine[field].clone();
                }
            }
            json!({
                "providerID": "arn:aws:autoscaling:eu-west-1:111122223333:autoScalingGroup:0:autoScalingGroupName/capi-1",
                "providerIDList": ["aws:///eu-west-1a/i-0123456789abcdef0"],
                "minSize": 1,
                "maxSize": 5,
                "availabilityZones": ["eu-west-1a"],
                "availabilityZoneSubnetType": "private",
                "subnets": [{"id": "subnet-0123456789abcdef0"}],
                "additionalTags": {"team": "a"},
                "awsLaunchTemplate": template,
                "capacityRebalance": true,
                "cloudInit": machine["cloudInit"].clone(),
            })
        }
        "AWSClusterControllerIdentity" => {
            let spec = json!({"allowedNamespaces": {"list": ["team-a"],
                              "selector": {"matchLabels": {"team": "a"}}}});
            return json!({"metadata": {"name": "default"}, "spec": spec});
        }
        "AWSClusterStaticIdentity" => json!({
            "secretRef": "aws-credentials",
            "allowedNamespaces": {"list": ["team-a"], "selector": {"matchLabels": {"team": "a"}}},
        }),
        "AWSClusterRoleIdentity" => json!({
            "roleARN": "arn:aws:iam::111122223333:role/capi",
            "sessionName": "capi-rs",
            "durationSeconds": 3600,
            "inlinePolicy": "{}",
            "externalID": "team-a",
            "allowedNamespaces": {"list": ["team-a"], "selector": {"matchLabels": {"team": "a"}}},
            "sourceIdentityRef": {"kind": "AWSClusterControllerIdentity", "name": "default"},
        }),
        other => panic!("no base object for {other}"),
    };
    json!({"metadata": {"name": "bad-input"}, "spec": spec})
}

#[tokio::test]
async fn the_api_server_refuses_what_the_aws_schemas_forbid_and_names_the_field() {
    let crds = provider_aws::api::crds();
    let env = TestEnv::start_with_crds(&crds).await.unwrap();
    let ns = env.namespace().await.unwrap();
    if let Err(misses) = check_crds_refuse_all(&env.client(), &ns, &crds, base).await {
        panic!("{misses}");
    }
}
