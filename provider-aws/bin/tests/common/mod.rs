//! What the `aws-manager` end-to-end tests need of moto besides the provider: an AWS account of
//! its own with temporary credentials, the account prepared as a CAPA user's would be (the IAM
//! instance profiles `clusterawsadm bootstrap iam` creates, an AMI named in CAPA's format, an SSH
//! key pair), the census of a cluster, the instances booted from their user data, the
//! fault-injecting proxy of the provider's tests, and the check that no credential shows.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../tests/common/census.rs"]
pub mod census;
pub mod ec2_servers;
#[path = "../../../tests/common/endpoint.rs"]
mod endpoint;
#[path = "../../../tests/common/proxy.rs"]
pub mod proxy;

use std::time::{SystemTime, UNIX_EPOCH};

use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
pub use endpoint::{REGION, endpoint};

/// Temporary credentials of a moto account no other test uses: moto maps the access key of a
/// role it handed out to the role's account, so every request signed with them — the provider's
/// included, which cannot send moto's account header — lands in that account.
#[derive(Clone)]
pub struct Account {
    pub id: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    endpoint: String,
}

/// `value` percent-encoded for a form body.
fn form_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The text of XML element `name` in `xml`.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(&xml[start..end])
}

/// A query-protocol call of `service` (STS, IAM) on moto as `access_key_id`. moto does not
/// check signatures: it reads the service and the access key from the credential scope.
async fn query(
    endpoint: &str,
    access_key_id: &str,
    service: &str,
    params: &[(&str, &str)],
) -> Result<String, String> {
    let body: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", form_encode(v)))
        .collect();
    let response = reqwest::Client::new()
        .post(format!("{endpoint}/"))
        .header(
            "Authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential={access_key_id}/20260101/{REGION}/{service}/aws4_request, \
                 SignedHeaders=host, Signature=0"
            ),
        )
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body.join("&"))
        .send()
        .await
        .map_err(|e| format!("{service}: {e}"))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| format!("{service}: {e}"))?;
    if status.is_success() {
        Ok(text)
    } else {
        Err(format!("{service} answered {status}: {text}"))
    }
}

impl Account {
    /// Assumes a role in a fresh account.
    pub async fn fresh() -> Self {
        let endpoint = endpoint();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let id = format!(
            "{:012}",
            (nanos + u128::from(std::process::id())) % 900_000_000_000 + 100_000_000_000
        );
        let answer = query(
            &endpoint,
            "AKIAE2ETESTSETUP0000",
            "sts",
            &[
                ("Action", "AssumeRole"),
                ("Version", "2011-06-15"),
                ("RoleArn", &format!("arn:aws:iam::{id}:role/capi-rs-e2e")),
                ("RoleSessionName", "capi-rs-e2e"),
            ],
        )
        .await
        .unwrap();
        let field = |name| element(&answer, name).unwrap_or_default().to_string();
        let account = Self {
            access_key_id: field("AccessKeyId"),
            secret_access_key: field("SecretAccessKey"),
            session_token: field("SessionToken"),
            id,
            endpoint,
        };
        assert!(
            !account.access_key_id.is_empty() && !account.session_token.is_empty(),
            "moto's AssumeRole gave no credentials"
        );
        account
    }

    /// The credentials' values, none of which may show outside their Secret.
    pub fn secrets(&self) -> [&str; 3] {
        [
            &self.access_key_id,
            &self.secret_access_key,
            &self.session_token,
        ]
    }

    fn credentials(&self) -> Credentials {
        Credentials::new(
            &self.access_key_id,
            &self.secret_access_key,
            Some(self.session_token.clone()),
            None,
            "capi-rs-e2e",
        )
    }

    /// An EC2 client of the account (no retries: moto answers what it lacks with a 500).
    pub fn ec2(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::from_conf(
            aws_sdk_ec2::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .region(Region::new(REGION))
                .endpoint_url(&self.endpoint)
                .credentials_provider(self.credentials())
                .retry_config(aws_sdk_ec2::config::retry::RetryConfig::disabled())
                .build(),
        )
    }

    /// A Secrets Manager client of the account.
    pub fn secrets_manager(&self) -> aws_sdk_secretsmanager::Client {
        aws_sdk_secretsmanager::Client::from_conf(
            aws_sdk_secretsmanager::Config::builder()
                .behavior_version(aws_sdk_secretsmanager::config::BehaviorVersion::latest())
                .region(aws_sdk_secretsmanager::config::Region::new(REGION))
                .endpoint_url(&self.endpoint)
                .credentials_provider(self.credentials())
                .retry_config(aws_sdk_secretsmanager::config::retry::RetryConfig::disabled())
                .build(),
        )
    }

    /// An Auto Scaling client of the account.
    pub fn autoscaling(&self) -> aws_sdk_autoscaling::Client {
        aws_sdk_autoscaling::Client::from_conf(
            aws_sdk_autoscaling::Config::builder()
                .behavior_version(aws_sdk_autoscaling::config::BehaviorVersion::latest())
                .region(aws_sdk_autoscaling::config::Region::new(REGION))
                .endpoint_url(&self.endpoint)
                .credentials_provider(self.credentials())
                .retry_config(aws_sdk_autoscaling::config::retry::RetryConfig::disabled())
                .build(),
        )
    }

    /// An ELBv2 client of the account.
    pub fn elb(&self) -> aws_sdk_elasticloadbalancingv2::Client {
        aws_sdk_elasticloadbalancingv2::Client::from_conf(
            aws_sdk_elasticloadbalancingv2::Config::builder()
                .behavior_version(BehaviorVersion::latest())
                .region(Region::new(REGION))
                .endpoint_url(&self.endpoint)
                .credentials_provider(self.credentials())
                .retry_config(
                    aws_sdk_elasticloadbalancingv2::config::retry::RetryConfig::disabled(),
                )
                .build(),
        )
    }

    /// Creates IAM instance profile `name` (what `clusterawsadm bootstrap iam` does for CAPA's
    /// default profiles).
    pub async fn instance_profile(&self, name: &str) {
        query(
            &self.endpoint,
            &self.access_key_id,
            "iam",
            &[
                ("Action", "CreateInstanceProfile"),
                ("Version", "2010-05-08"),
                ("InstanceProfileName", name),
            ],
        )
        .await
        .unwrap();
    }

    /// Publishes an x86_64 AMI named `name` in the account, as an image pipeline would: an
    /// image made from an instance of one of moto's x86_64 Linux AMIs, the instance terminated
    /// (moto's `RegisterImage` records no architecture, which CAPA's lookup filters on).
    pub async fn image(&self, name: &str) -> String {
        let ec2 = self.ec2();
        let offered = ec2
            .describe_images()
            .owners("amazon")
            .filters(
                aws_sdk_ec2::types::Filter::builder()
                    .name("architecture")
                    .values("x86_64")
                    .build(),
            )
            .send()
            .await
            .unwrap();
        let source = offered
            .images()
            .iter()
            .find(|i| !i.name().unwrap_or_default().starts_with("Windows"))
            .and_then(|i| i.image_id())
            .expect("moto offers an x86_64 Linux AMI")
            .to_string();
        let builder = ec2
            .run_instances()
            .image_id(source)
            .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
            .min_count(1)
            .max_count(1)
            .send()
            .await
            .unwrap();
        let instance = builder.instances()[0].instance_id().unwrap().to_string();
        let image = ec2
            .create_image()
            .instance_id(&instance)
            .name(name)
            .send()
            .await
            .unwrap();
        ec2.terminate_instances()
            .instance_ids(instance)
            .send()
            .await
            .unwrap();
        image.image_id().unwrap().to_string()
    }

    /// Creates SSH key pair `name`.
    pub async fn key_pair(&self, name: &str) {
        self.ec2()
            .create_key_pair()
            .key_name(name)
            .send()
            .await
            .unwrap();
    }
}

/// Fails if `text` (what `source` shows a user) holds one of `account`'s credentials or a
/// signed request's secrets.
pub fn assert_no_credentials(source: &str, text: &str, account: &Account) {
    for (i, secret) in account.secrets().iter().enumerate() {
        assert!(
            !text.contains(secret),
            "{source} contains credential value #{i}"
        );
    }
    let lower = text.to_ascii_lowercase();
    for header in ["x-amz-security-token", "authorization: aws4"] {
        assert!(!lower.contains(header), "{source} contains {header}");
    }
}
