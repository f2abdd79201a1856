//! An ARM test server of the project's own: stateful, on 127.0.0.1 over TLS, modelled on the
//! public ARM REST reference for the resources the provider manages.
//!
//! - Resource IDs by path, the kind's api-version required; PUT answers `201` (new) or `200`
//!   with `provisioningState` `Creating`/`Updating` and an `Azure-AsyncOperation` URL; the
//!   operation ends (`Succeeded`) after [`Faults::operation_time`] whether or not anyone polls;
//!   resource groups are made at once. GET answers the resource with what ARM fills in (IDs of
//!   children, addresses, the subnets' IP configurations, a pool's members, the NIC's VM, the
//!   VM's OS disk); `customData` is never answered.
//! - DELETE answers `202` + operation (`204` for nothing), the resource `Deleting` until it ends;
//!   a resource group takes everything in it; a VM takes the NICs and disks it was told to
//!   (`deleteOption: Delete`) and leaves the others unattached.
//! - ARM's dependency rules: a subnet (or network) with IP configurations in it, a NIC attached
//!   to a VM, a security group used by a subnet, a public IP used by a frontend or NIC, a disk
//!   attached to a VM cannot be deleted; references must exist; a VM's `customData` cannot
//!   change.
//! - A client-credentials token endpoint (`/<tenant>/oauth2/v2.0/token`); every ARM request
//!   must carry a token it issued.
//! - Faults on demand ([`Faults`]): throttling (`429` + `Retry-After`), conflicts (`409`),
//!   failed and vanished operations, slow operations, lost responses (the request is carried
//!   out, the connection closed unanswered), a low remaining-request budget.
//! - **Every request body the provider sends and every body the server answers is checked
//!   against Azure's own models** ([`ModelChecker`]); a mismatch is recorded
//!   ([`ArmServer::violations`]) and answered `400 ModelViolation`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use provider_azure::arm::{ResourceId, ResourceType};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::model_checker::{Direction, ModelChecker};

/// The service principal the server accepts.
pub const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
/// Its client ID.
pub const CLIENT: &str = "0b3c6e4a-1f2d-4c5b-8a9e-7d6c5b4a3f2e";
/// Its secret.
pub const SECRET: &str = "Qx8Q~abcDEF1234567890ghijKLMNOPqrstuvWXYZ";

/// Which requests a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The method (`None`: any).
    pub method: Option<&'static str>,
    /// The kind (`None`: any).
    pub kind: Option<ResourceType>,
}

impl Target {
    /// `method` requests for `kind`.
    pub fn of(method: &'static str, kind: ResourceType) -> Self {
        Self {
            method: Some(method),
            kind: Some(kind),
        }
    }

    /// Every ARM request.
    pub fn any() -> Self {
        Self {
            method: None,
            kind: None,
        }
    }

    fn matches(&self, method: &Method, kind: Option<ResourceType>) -> bool {
        self.method.is_none_or(|m| m == method.as_str())
            && self.kind.is_none_or(|k| Some(k) == kind)
    }
}

/// What the server does to the next requests.
#[derive(Debug)]
pub struct Faults {
    /// How long an operation takes.
    pub operation_time: Duration,
    /// The next this many matching requests are answered `429` with `Retry-After: 1`.
    pub throttle: Vec<(Target, u32)>,
    /// The next this many matching requests are answered `409 AnotherOperationInProgress`.
    pub conflict: Vec<(Target, u32)>,
    /// The next matching operation fails (`Failed`, the resource `Failed`).
    pub fail_operation: Vec<Target>,
    /// The next matching operation's status answers `404` (the operation itself completes).
    pub vanish_operation: Vec<Target>,
    /// The next matching request is carried out and its connection closed unanswered.
    pub lose_response: Vec<Target>,
    /// Matching operations take this long instead.
    pub slow: Vec<(Target, Duration)>,
    /// Answer every request with this many writes left in the subscription's budget.
    pub remaining_writes: Option<u64>,
    /// Operations are followed by their `Location` URL only (no `Azure-AsyncOperation`), which
    /// answers `202` while under way, the resource (`200`) or nothing (`204`) once done, and the
    /// operation's error status when it failed.
    pub location_only: bool,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            operation_time: Duration::from_millis(300),
            throttle: Vec::new(),
            conflict: Vec::new(),
            fail_operation: Vec::new(),
            vanish_operation: Vec::new(),
            lose_response: Vec::new(),
            slow: Vec::new(),
            remaining_writes: None,
            location_only: false,
        }
    }
}

fn take_count(list: &mut [(Target, u32)], method: &Method, kind: Option<ResourceType>) -> bool {
    if let Some(entry) = list
        .iter_mut()
        .find(|(t, n)| *n > 0 && t.matches(method, kind))
    {
        entry.1 -= 1;
        return true;
    }
    false
}

fn take_once(list: &mut Vec<Target>, method: &Method, kind: Option<ResourceType>) -> bool {
    if let Some(at) = list.iter().position(|t| t.matches(method, kind)) {
        list.remove(at);
        return true;
    }
    false
}

/// A stored resource.
#[derive(Clone, Debug)]
pub struct Stored {
    /// Its ID as first written.
    pub id: String,
    /// Its kind.
    pub kind: ResourceType,
    /// Its body as last written, without read-only properties.
    pub body: Value,
    /// `Creating`, `Updating`, `Succeeded`, `Failed`, `Deleting`.
    pub state: String,
    /// A digest of its `customData` (a VM's).
    custom_data: Option<String>,
    /// Its `customData` as sent (never answered; what the VM boots with).
    custom_data_sent: Option<String>,
    /// An address ARM assigned (a NIC's private, a public IP's public one).
    address: Option<String>,
    /// A VM's unique ID.
    vm_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Succeed,
    Fail,
}

/// An operation under way or ended.
#[derive(Clone, Debug)]
struct Operation {
    /// The resource's key.
    target: String,
    delete: bool,
    done_at: Instant,
    outcome: Outcome,
    vanished: bool,
    ended: bool,
}

/// Everything the server holds.
#[derive(Debug, Default)]
pub struct World {
    /// Resources by lower-cased ID.
    pub resources: BTreeMap<String, Stored>,
    operations: HashMap<String, Operation>,
    /// What the server does to the next requests.
    pub faults: Faults,
    /// Every request: method, path (no query), status (`0`: lost).
    pub requests: Vec<(String, String, u16)>,
    /// Token requests answered.
    pub tokens_issued: u64,
    tokens: Vec<String>,
    /// Every token ever issued (to check none is shown anywhere).
    pub issued: Vec<String>,
    /// Model and protocol violations.
    pub violations: Vec<String>,
    next_address: u32,
}

impl World {
    /// How many `method` requests went to resources of `kind`.
    pub fn count(&self, method: &str, kind: ResourceType) -> usize {
        self.requests
            .iter()
            .filter(|(m, path, _)| {
                m == method
                    && ResourceId::parse(path).is_ok_and(|id| id.kind == kind)
                    && !path.contains("/operations/")
                    && !path.contains("/operationResults/")
            })
            .count()
    }

    /// The resources of `kind`.
    pub fn of_kind(&self, kind: ResourceType) -> Vec<&Stored> {
        self.resources.values().filter(|r| r.kind == kind).collect()
    }

    /// The names of every resource left (for a census).
    pub fn census(&self) -> Vec<String> {
        self.resources.values().map(|r| r.id.clone()).collect()
    }

    /// Resource `id` as ARM answers it.
    pub fn read(&self, id: &str) -> Option<Value> {
        self.find(id).map(|stored| self.answer(stored))
    }

    /// What VM `id` was created with (`customData`, base64), which ARM never answers.
    pub fn custom_data(&self, id: &str) -> Option<String> {
        self.find(id).and_then(|vm| vm.custom_data_sent.clone())
    }

    /// The private address ARM gave NIC `id`.
    pub fn private_address(&self, id: &str) -> Option<String> {
        self.find(id).and_then(|nic| nic.address.clone())
    }

    /// Revokes every token issued (the next requests need new ones).
    pub fn revoke_tokens(&mut self) {
        self.tokens.clear();
    }

    /// Ends operations whose time has come.
    fn tick(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .operations
            .iter()
            .filter(|(_, op)| !op.ended && op.done_at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let Some(op) = self.operations.get_mut(&key) else {
                continue;
            };
            op.ended = true;
            let op = op.clone();
            match (op.delete, &op.outcome) {
                (true, Outcome::Succeed) => self.remove(&op.target),
                (false, Outcome::Succeed) => {
                    if let Some(r) = self.resources.get_mut(&op.target) {
                        r.state = "Succeeded".into();
                    }
                    self.materialize(&op.target);
                }
                (_, Outcome::Fail) => {
                    if let Some(r) = self.resources.get_mut(&op.target) {
                        r.state = "Failed".into();
                    }
                }
            }
        }
    }

    /// What a VM's success makes: its OS disk.
    fn materialize(&mut self, key: &str) {
        let Some(vm) = self.resources.get(key).cloned() else {
            return;
        };
        if vm.kind != ResourceType::VirtualMachine {
            return;
        }
        let Ok(id) = ResourceId::parse(&vm.id) else {
            return;
        };
        let storage = &vm.body["properties"]["storageProfile"];
        let mut disks = vec![(
            storage["osDisk"]["name"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("{}_OsDisk_1", id.name)),
            storage["osDisk"]["diskSizeGB"].as_i64().unwrap_or(30),
        )];
        for disk in storage["dataDisks"].as_array().cloned().unwrap_or_default() {
            if let Some(name) = disk["name"].as_str() {
                disks.push((name.to_string(), disk["diskSizeGB"].as_i64().unwrap_or(0)));
            }
        }
        for (name, size) in disks {
            let disk_id = ResourceId::new(
                &id.subscription,
                &id.resource_group,
                ResourceType::Disk,
                &name,
            );
            let disk_key = disk_id.to_string().to_lowercase();
            self.resources.entry(disk_key).or_insert_with(|| Stored {
                id: disk_id.to_string(),
                kind: ResourceType::Disk,
                body: json!({
                    "location": vm.body["location"],
                    "properties": {"diskSizeGB": size},
                    "tags": vm.body.get("tags").cloned().unwrap_or(json!({})),
                }),
                state: "Succeeded".into(),
                custom_data: None,
                custom_data_sent: None,
                address: None,
                vm_id: None,
            });
        }
    }

    /// Removes a resource and what goes with it.
    fn remove(&mut self, key: &str) {
        let Some(removed) = self.resources.remove(key) else {
            return;
        };
        match removed.kind {
            ResourceType::ResourceGroup => {
                let prefix = format!("{key}/");
                self.resources.retain(|k, _| !k.starts_with(&prefix));
            }
            ResourceType::VirtualNetwork => {
                let prefix = format!("{key}/");
                self.resources.retain(|k, _| !k.starts_with(&prefix));
            }
            ResourceType::VirtualMachine => {
                let props = &removed.body["properties"];
                for nic in props["networkProfile"]["networkInterfaces"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                {
                    if nic["properties"]["deleteOption"] == "Delete"
                        && let Some(id) = nic["id"].as_str()
                    {
                        self.resources.remove(&id.to_lowercase());
                    }
                }
                let Ok(id) = ResourceId::parse(&removed.id) else {
                    return;
                };
                let mut disks = vec![props["storageProfile"]["osDisk"].clone()];
                disks.extend(
                    props["storageProfile"]["dataDisks"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default(),
                );
                for disk in disks {
                    let name = disk["name"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("{}_OsDisk_1", id.name));
                    let key = ResourceId::new(
                        &id.subscription,
                        &id.resource_group,
                        ResourceType::Disk,
                        &name,
                    )
                    .to_string()
                    .to_lowercase();
                    if disk["deleteOption"] == "Delete" {
                        self.resources.remove(&key);
                    }
                }
            }
            _ => {}
        }
    }

    fn find(&self, id: &str) -> Option<&Stored> {
        self.resources.get(&id.to_lowercase())
    }

    /// Keys of NICs whose IP configurations use `pred` on their properties.
    fn nic_configurations(&self, mut pred: impl FnMut(&Value) -> bool) -> Vec<String> {
        let mut out = Vec::new();
        for nic in self.of_kind(ResourceType::NetworkInterface) {
            for conf in nic.body["properties"]["ipConfigurations"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                if pred(&conf["properties"]) {
                    out.push(format!(
                        "{}/ipConfigurations/{}",
                        nic.id,
                        conf["name"].as_str().unwrap_or_default()
                    ));
                }
            }
        }
        out
    }

    /// The VM using NIC `nic_id`.
    fn vm_of_nic(&self, nic_id: &str) -> Option<String> {
        self.of_kind(ResourceType::VirtualMachine)
            .into_iter()
            .find(|vm| {
                vm.body["properties"]["networkProfile"]["networkInterfaces"]
                    .as_array()
                    .is_some_and(|nics| {
                        nics.iter().any(|n| {
                            n["id"]
                                .as_str()
                                .is_some_and(|i| i.eq_ignore_ascii_case(nic_id))
                        })
                    })
            })
            .map(|vm| vm.id.clone())
    }

    fn refers(value: &Value, id: &str) -> bool {
        value["id"]
            .as_str()
            .is_some_and(|i| i.eq_ignore_ascii_case(id))
    }

    /// The resource as ARM answers it.
    fn answer(&self, stored: &Stored) -> Value {
        let mut body = stored.body.clone();
        let id = stored.id.clone();
        let parsed = ResourceId::parse(&id).ok();
        let name = parsed.as_ref().map(|p| p.name.clone()).unwrap_or_default();
        body["id"] = json!(id);
        body["name"] = json!(name);
        body["type"] = json!(type_name(stored.kind));
        let mut properties = if body["properties"].is_object() {
            body["properties"].clone()
        } else {
            json!({})
        };
        properties["provisioningState"] = json!(stored.state);
        match stored.kind {
            ResourceType::VirtualNetwork => {
                let prefix = format!("{}/subnets/", id.to_lowercase());
                let subnets: Vec<Value> = self
                    .resources
                    .iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(_, s)| {
                        let mut a = self.answer(s);
                        if let Some(o) = a.as_object_mut() {
                            o.remove("type");
                        }
                        a
                    })
                    .collect();
                properties["subnets"] = json!(subnets);
            }
            ResourceType::Subnet => {
                let configurations = self.nic_configurations(|p| Self::refers(&p["subnet"], &id));
                if !configurations.is_empty() {
                    properties["ipConfigurations"] = json!(
                        configurations
                            .iter()
                            .map(|c| json!({"id": c}))
                            .collect::<Vec<_>>()
                    );
                }
            }
            ResourceType::NetworkSecurityGroup => {
                let subnets: Vec<Value> = self
                    .of_kind(ResourceType::Subnet)
                    .into_iter()
                    .filter(|s| Self::refers(&s.body["properties"]["networkSecurityGroup"], &id))
                    .map(|s| json!({"id": s.id}))
                    .collect();
                if !subnets.is_empty() {
                    properties["subnets"] = json!(subnets);
                }
                if let Some(rules) = properties["securityRules"].as_array_mut() {
                    for rule in rules {
                        let rule_name = rule["name"].as_str().unwrap_or_default().to_string();
                        rule["id"] = json!(format!("{id}/securityRules/{rule_name}"));
                        rule["properties"]["provisioningState"] = json!("Succeeded");
                    }
                }
            }
            ResourceType::NatGateway => {
                let subnets: Vec<Value> = self
                    .of_kind(ResourceType::Subnet)
                    .into_iter()
                    .filter(|s| Self::refers(&s.body["properties"]["natGateway"], &id))
                    .map(|s| json!({"id": s.id}))
                    .collect();
                if !subnets.is_empty() {
                    properties["subnets"] = json!(subnets);
                }
            }
            ResourceType::PublicIpAddress => {
                if let Some(gateway) =
                    self.of_kind(ResourceType::NatGateway)
                        .into_iter()
                        .find(|g| {
                            g.body["properties"]["publicIpAddresses"]
                                .as_array()
                                .is_some_and(|ips| ips.iter().any(|ip| Self::refers(ip, &id)))
                        })
                {
                    properties["natGateway"] = json!({"id": gateway.id});
                }
                properties["ipAddress"] = json!(stored.address);
                if let Some(label) = properties["dnsSettings"]["domainNameLabel"].as_str() {
                    let location = body["location"].as_str().unwrap_or_default();
                    properties["dnsSettings"]["fqdn"] =
                        json!(format!("{label}.{location}.cloudapp.azure.com"));
                }
                let users: Vec<String> = self
                    .of_kind(ResourceType::LoadBalancer)
                    .into_iter()
                    .flat_map(|lb| {
                        lb.body["properties"]["frontendIPConfigurations"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                            .into_iter()
                            .filter(|f| Self::refers(&f["properties"]["publicIPAddress"], &id))
                            .map(|f| {
                                format!(
                                    "{}/frontendIPConfigurations/{}",
                                    lb.id,
                                    f["name"].as_str().unwrap_or_default()
                                )
                            })
                            .collect::<Vec<_>>()
                    })
                    .chain(self.nic_configurations(|p| Self::refers(&p["publicIPAddress"], &id)))
                    .collect();
                if let Some(user) = users.first() {
                    properties["ipConfiguration"] = json!({"id": user});
                }
            }
            ResourceType::LoadBalancer => {
                for collection in [
                    "frontendIPConfigurations",
                    "backendAddressPools",
                    "probes",
                    "loadBalancingRules",
                ] {
                    if let Some(children) = properties[collection].as_array_mut() {
                        for child in children {
                            let child_name = child["name"].as_str().unwrap_or_default().to_string();
                            let child_id = format!("{id}/{collection}/{child_name}");
                            child["id"] = json!(child_id);
                            if !child["properties"].is_object() {
                                child["properties"] = json!({});
                            }
                            child["properties"]["provisioningState"] = json!("Succeeded");
                            if collection == "backendAddressPools" {
                                let members = self.nic_configurations(|p| {
                                    p["loadBalancerBackendAddressPools"].as_array().is_some_and(
                                        |pools| pools.iter().any(|x| Self::refers(x, &child_id)),
                                    )
                                });
                                if !members.is_empty() {
                                    child["properties"]["backendIPConfigurations"] = json!(
                                        members
                                            .iter()
                                            .map(|m| json!({"id": m}))
                                            .collect::<Vec<_>>()
                                    );
                                }
                            }
                        }
                    }
                }
            }
            ResourceType::NetworkInterface => {
                if let Some(configurations) = properties["ipConfigurations"].as_array_mut() {
                    for conf in configurations {
                        let conf_name = conf["name"].as_str().unwrap_or_default().to_string();
                        conf["id"] = json!(format!("{id}/ipConfigurations/{conf_name}"));
                        conf["properties"]["privateIPAddress"] = json!(stored.address);
                        conf["properties"]["provisioningState"] = json!("Succeeded");
                    }
                }
                if let Some(vm) = self.vm_of_nic(&id) {
                    properties["virtualMachine"] = json!({"id": vm});
                }
            }
            ResourceType::VirtualMachine => {
                properties["vmId"] = json!(stored.vm_id);
                if let Some(os) = properties["osProfile"].as_object_mut() {
                    os.remove("customData");
                }
                if let Some(parsed) = &parsed {
                    let disk_name = properties["storageProfile"]["osDisk"]["name"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("{}_OsDisk_1", parsed.name));
                    properties["storageProfile"]["osDisk"]["name"] = json!(disk_name);
                    let disk_id = ResourceId::new(
                        &parsed.subscription,
                        &parsed.resource_group,
                        ResourceType::Disk,
                        &disk_name,
                    );
                    if !properties["storageProfile"]["osDisk"]["managedDisk"].is_object() {
                        properties["storageProfile"]["osDisk"]["managedDisk"] = json!({});
                    }
                    properties["storageProfile"]["osDisk"]["managedDisk"]["id"] =
                        json!(disk_id.to_string());
                }
            }
            ResourceType::Disk => {
                let vm = self
                    .of_kind(ResourceType::VirtualMachine)
                    .into_iter()
                    .find(|vm| {
                        let disk_name = stored.id.rsplit('/').next().unwrap_or_default();
                        let storage = &vm.body["properties"]["storageProfile"];
                        let os = storage["osDisk"]["name"]
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| {
                                format!("{}_OsDisk_1", vm.id.rsplit('/').next().unwrap_or_default())
                            });
                        os.eq_ignore_ascii_case(disk_name)
                            || storage["dataDisks"].as_array().is_some_and(|d| {
                                d.iter().any(|d| {
                                    d["name"]
                                        .as_str()
                                        .is_some_and(|n| n.eq_ignore_ascii_case(disk_name))
                                })
                            })
                    });
                properties["diskState"] = json!(if vm.is_some() {
                    "Attached"
                } else {
                    "Unattached"
                });
                if let Some(vm) = vm {
                    body["managedBy"] = json!(vm.id);
                }
            }
            _ => {}
        }
        body["properties"] = properties;
        body
    }

    fn assign_address(&mut self, public: bool) -> String {
        self.next_address += 1;
        let n = self.next_address;
        if public {
            format!("20.{}.{}.{}", 40 + n / 65536 % 200, n / 256 % 256, n % 256)
        } else {
            format!("10.{}.{}.{}", n / 65536 % 256, n / 256 % 256, 4 + n % 250)
        }
    }
}

/// `Microsoft.Network/virtualNetworks` and the like.
pub fn type_name(kind: ResourceType) -> String {
    match (kind.namespace(), kind.parent()) {
        (None, _) => "Microsoft.Resources/resourceGroups".into(),
        (Some(ns), Some(parent)) => format!("{ns}/{}/{}", parent.collection(), kind.collection()),
        (Some(ns), None) => format!("{ns}/{}", kind.collection()),
    }
}

/// The running server.
pub struct ArmServer {
    /// `https://127.0.0.1:<port>`: the Resource Manager and the token authority.
    pub url: String,
    /// Its CA (PEM), to trust.
    pub ca_pem: String,
    /// Its state.
    pub world: Arc<Mutex<World>>,
    checker: Arc<ModelChecker>,
    operations: AtomicU64,
}

type Answer = Result<Response<Full<Bytes>>, LostResponse>;

/// A response deliberately not sent.
#[derive(Debug)]
pub struct LostResponse;

impl std::fmt::Display for LostResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("response lost on purpose")
    }
}

impl std::error::Error for LostResponse {}

fn respond(status: u16, body: &Value, headers: &[(&str, String)]) -> Response<Full<Bytes>> {
    let bytes = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    let mut response = Response::new(Full::new(bytes));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response
        .headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    for (name, value) in headers {
        if let Ok(value) = value.parse() {
            response.headers_mut().insert(
                hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value,
            );
        }
    }
    response
}

fn cloud_error(code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message}})
}

impl ArmServer {
    /// Starts a server on a free port of 127.0.0.1, checking bodies with `checker`.
    pub async fn start(checker: Arc<ModelChecker>) -> Arc<Self> {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert.der().to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = Arc::new(Self {
            url: format!("https://127.0.0.1:{port}"),
            ca_pem: cert.pem(),
            world: Arc::default(),
            checker,
            operations: AtomicU64::new(0),
        });
        let serving = Arc::clone(&server);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, server) = (acceptor.clone(), Arc::clone(&serving));
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |request| {
                        let server = Arc::clone(&server);
                        async move { server.handle(request).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        server
    }

    /// A `reqwest` client trusting the server.
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(self.ca_pem.as_bytes()).unwrap()])
            .build()
            .unwrap()
    }

    /// How many bodies were checked against Azure's models.
    pub fn checked(&self) -> u64 {
        self.checker.checked()
    }

    /// Every violation seen.
    pub fn violations(&self) -> Vec<String> {
        self.world.lock().unwrap().violations.clone()
    }

    /// Panics listing the violations, if any.
    pub fn assert_clean(&self) {
        let violations = self.violations();
        assert!(
            violations.is_empty(),
            "the ARM test server saw {} violation(s):\n{}",
            violations.len(),
            violations.join("\n")
        );
    }

    /// Changes the faults.
    pub fn faults(&self, change: impl FnOnce(&mut Faults)) {
        change(&mut self.world.lock().unwrap().faults);
    }

    async fn check(&self, model: &str, direction: Direction, body: &Value, what: &str) -> bool {
        match self.checker.check(model, direction, body).await {
            Ok(()) => true,
            Err(problems) => {
                self.world.lock().unwrap().violations.push(format!(
                    "{what} ({model}, {direction:?}): {}",
                    problems.join("; ")
                ));
                false
            }
        }
    }

    /// Answers with `body`, checked as `model` (a response).
    async fn answer(
        &self,
        status: u16,
        model: &str,
        body: Value,
        headers: &[(&str, String)],
        what: &str,
    ) -> Response<Full<Bytes>> {
        if !body.is_null() {
            self.check(model, Direction::Response, &body, what).await;
        }
        respond(status, &body, headers)
    }

    async fn error(
        &self,
        status: u16,
        kind: Option<ResourceType>,
        code: &str,
        message: &str,
    ) -> Response<Full<Bytes>> {
        let model = match kind.and_then(ResourceType::namespace) {
            Some("Microsoft.Compute") => "compute:CloudError",
            Some(_) => "network:CloudError",
            None => "resource:ErrorResponse",
        };
        let body = cloud_error(code, message);
        let body = if model == "resource:ErrorResponse" {
            body["error"].clone()
        } else {
            body
        };
        self.check(model, Direction::Response, &body, code).await;
        let body = cloud_error(code, message);
        respond(status, &body, &[])
    }

    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, LostResponse> {
        let (parts, body) = request.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or_default().to_string();
        let answer = if path.ends_with("/oauth2/v2.0/token") {
            Ok(self.token(&path, &body))
        } else {
            self.arm(&parts, &path, &query, &body).await
        };
        let status = answer.as_ref().map(|r| r.status().as_u16()).unwrap_or(0);
        self.world
            .lock()
            .unwrap()
            .requests
            .push((parts.method.to_string(), path, status));
        answer
    }

    fn token(&self, path: &str, body: &[u8]) -> Response<Full<Bytes>> {
        let form: HashMap<String, String> = String::from_utf8_lossy(body)
            .split('&')
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                Some((k.to_string(), percent_decode(v)))
            })
            .collect();
        let tenant_ok = path.trim_start_matches('/').starts_with(TENANT);
        if !tenant_ok
            || form.get("client_id").map(String::as_str) != Some(CLIENT)
            || form.get("client_secret").map(String::as_str) != Some(SECRET)
            || form.get("grant_type").map(String::as_str) != Some("client_credentials")
        {
            // Entra ID does not echo the secret; this server does, so that a client which
            // failed to redact it would be caught.
            let tried = form.get("client_secret").cloned().unwrap_or_default();
            return respond(
                401,
                &json!({
                    "error": "invalid_client",
                    "error_description": format!(
                        "AADSTS7000215: Invalid client secret provided ('{tried}')."
                    ),
                }),
                &[],
            );
        }
        let mut world = self.world.lock().unwrap();
        world.tokens_issued += 1;
        let token = format!(
            "eyJ0eXAiOiJKV1QifQ.{}.{:016x}",
            world.tokens_issued,
            fastrand_u64()
        );
        world.tokens.push(token.clone());
        world.issued.push(token.clone());
        respond(
            200,
            &json!({
                "token_type": "Bearer",
                "expires_in": 3599,
                "ext_expires_in": 3599,
                "access_token": token,
            }),
            &[],
        )
    }

    async fn arm(
        &self,
        parts: &hyper::http::request::Parts,
        path: &str,
        query: &str,
        body: &[u8],
    ) -> Answer {
        let authorized = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| self.world.lock().unwrap().tokens.iter().any(|k| k == t));
        if !authorized {
            return Ok(self
                .error(
                    401,
                    None,
                    "InvalidAuthenticationToken",
                    "The access token is invalid.",
                )
                .await);
        }
        if path.contains("/operations/") {
            return Ok(self.operation_status(path).await);
        }
        if path.contains("/operationResults/") {
            return Ok(self.operation_result(path).await);
        }
        let id = match ResourceId::parse(path) {
            Ok(id) => id,
            Err(e) => {
                return Ok(self
                    .error(400, None, "InvalidResourceType", &e.to_string())
                    .await);
            }
        };
        let kind = Some(id.kind);
        let api_version = query
            .split('&')
            .find_map(|p| p.strip_prefix("api-version="))
            .unwrap_or_default();
        if api_version != id.kind.api_version() {
            self.world.lock().unwrap().violations.push(format!(
                "{} {path}: api-version {api_version:?}, not {}",
                parts.method,
                id.kind.api_version()
            ));
            return Ok(self
                .error(
                    400,
                    kind,
                    "InvalidApiVersionParameter",
                    &format!("The api-version '{api_version}' is invalid."),
                )
                .await);
        }
        let (throttled, conflicted, lose, remaining) = {
            let mut world = self.world.lock().unwrap();
            world.tick();
            let faults = &mut world.faults;
            (
                take_count(&mut faults.throttle, &parts.method, kind),
                parts.method != Method::GET
                    && take_count(&mut faults.conflict, &parts.method, kind),
                take_once(&mut faults.lose_response, &parts.method, kind),
                faults.remaining_writes,
            )
        };
        if throttled {
            let mut response = self
                .error(
                    429,
                    kind,
                    "TooManyRequests",
                    "The request is being throttled.",
                )
                .await;
            response
                .headers_mut()
                .insert("retry-after", "1".parse().unwrap());
            return Ok(response);
        }
        if conflicted {
            return Ok(self
                .error(
                    409,
                    kind,
                    "AnotherOperationInProgress",
                    "Another operation on this or dependent resource is in progress.",
                )
                .await);
        }
        let mut response = match parts.method {
            Method::GET => self.get(&id).await,
            Method::PUT => self.put(&id, body).await,
            Method::DELETE => self.delete(&id).await,
            _ => self.error(405, kind, "MethodNotAllowed", "no").await,
        };
        if let Some(left) = remaining {
            response.headers_mut().insert(
                "x-ms-ratelimit-remaining-subscription-writes",
                left.to_string().parse().unwrap(),
            );
        }
        if lose {
            return Err(LostResponse);
        }
        Ok(response)
    }

    async fn get(&self, id: &ResourceId) -> Response<Full<Bytes>> {
        let found = {
            let world = self.world.lock().unwrap();
            world.find(&id.to_string()).map(|s| world.answer(s))
        };
        match found {
            Some(body) => {
                self.answer(200, id.kind.model(), body, &[], &format!("GET {id}"))
                    .await
            }
            None => self.not_found(id).await,
        }
    }

    async fn not_found(&self, id: &ResourceId) -> Response<Full<Bytes>> {
        let group_missing = id.kind != ResourceType::ResourceGroup
            && self
                .world
                .lock()
                .unwrap()
                .find(&ResourceId::resource_group(&id.subscription, &id.resource_group).to_string())
                .is_none();
        if group_missing {
            return self
                .error(
                    404,
                    Some(id.kind),
                    "ResourceGroupNotFound",
                    &format!("Resource group '{}' could not be found.", id.resource_group),
                )
                .await;
        }
        self.error(
            404,
            Some(id.kind),
            "ResourceNotFound",
            &format!("The Resource '{}' was not found.", type_name(id.kind)),
        )
        .await
    }

    fn operation_url(&self, id: &ResourceId, op: &str) -> String {
        format!(
            "{}/subscriptions/{}/providers/{}/locations/local/operations/{op}?api-version={}",
            self.url,
            id.subscription,
            id.kind.namespace().unwrap_or("Microsoft.Resources"),
            id.kind.api_version()
        )
    }

    /// Starts an operation on `key`; returns its polling headers.
    fn start_operation(
        &self,
        world: &mut World,
        id: &ResourceId,
        delete: bool,
    ) -> Vec<(&'static str, String)> {
        let n = self.operations.fetch_add(1, Ordering::Relaxed) + 1;
        let op = format!(
            "{n:08x}-0000-4000-8000-{:012x}",
            fastrand_u64() & 0xffff_ffff_ffff
        );
        let method = if delete { Method::DELETE } else { Method::PUT };
        let kind = Some(id.kind);
        let faults = &mut world.faults;
        let duration = faults
            .slow
            .iter()
            .find(|(t, _)| t.matches(&method, kind))
            .map(|(_, d)| *d)
            .unwrap_or(faults.operation_time);
        let outcome = if take_once(&mut faults.fail_operation, &method, kind) {
            Outcome::Fail
        } else {
            Outcome::Succeed
        };
        let vanished = take_once(&mut faults.vanish_operation, &method, kind);
        world.operations.insert(
            op.clone(),
            Operation {
                target: id.to_string().to_lowercase(),
                delete,
                done_at: Instant::now() + duration,
                outcome,
                vanished,
                ended: false,
            },
        );
        let url = self.operation_url(id, &op);
        if world.faults.location_only {
            return vec![
                (
                    "location",
                    url.replace("/operations/", "/operationResults/"),
                ),
                ("retry-after", "1".into()),
            ];
        }
        vec![
            ("azure-asyncoperation", url.clone()),
            ("location", url),
            ("retry-after", "1".into()),
        ]
    }

    /// A `Location` URL: `202` while under way; the resource or `204` once done; the error's
    /// status when failed.
    async fn operation_result(&self, path: &str) -> Response<Full<Bytes>> {
        let op_id = path.rsplit('/').next().unwrap_or_default().to_string();
        let (op, body) = {
            let mut world = self.world.lock().unwrap();
            world.tick();
            let op = world.operations.get(&op_id).cloned();
            let body = op
                .as_ref()
                .and_then(|op| world.resources.get(&op.target))
                .map(|stored| (stored.kind, world.answer(stored)));
            (op, body)
        };
        let Some(op) = op.filter(|op| !op.vanished) else {
            return self
                .error(
                    404,
                    None,
                    "OperationNotFound",
                    "The operation was not found.",
                )
                .await;
        };
        match (op.ended, &op.outcome, body) {
            (false, _, _) => respond(202, &Value::Null, &[("retry-after", "1".to_string())]),
            (true, Outcome::Fail, body) => {
                self.error(
                    500,
                    body.map(|(kind, _)| kind),
                    "InternalOperationError",
                    "The operation failed on the test server, as asked.",
                )
                .await
            }
            (true, Outcome::Succeed, Some((kind, body))) if !op.delete => {
                self.answer(200, kind.model(), body, &[], "operation result")
                    .await
            }
            (true, Outcome::Succeed, _) => respond(204, &Value::Null, &[]),
        }
    }

    async fn operation_status(&self, path: &str) -> Response<Full<Bytes>> {
        let op_id = path.rsplit('/').next().unwrap_or_default().to_string();
        let status = {
            let mut world = self.world.lock().unwrap();
            world.tick();
            world.operations.get(&op_id).cloned()
        };
        let Some(op) = status.filter(|op| !op.vanished) else {
            return self
                .error(
                    404,
                    None,
                    "OperationNotFound",
                    "The operation was not found.",
                )
                .await;
        };
        let body = match (op.ended, &op.outcome) {
            (false, _) => json!({"status": "InProgress"}),
            (true, Outcome::Succeed) => json!({"status": "Succeeded"}),
            (true, Outcome::Fail) => json!({"status": "Failed", "error": {
                "code": "InternalOperationError",
                "message": "The operation failed on the test server, as asked."
            }}),
        };
        let headers = if op.ended {
            vec![]
        } else {
            vec![("retry-after", "1".to_string())]
        };
        self.answer(
            200,
            "network:OperationStatusResult",
            body,
            &headers,
            "operation status",
        )
        .await
    }

    async fn put(&self, id: &ResourceId, raw: &[u8]) -> Response<Full<Bytes>> {
        let kind = Some(id.kind);
        let Ok(body) = serde_json::from_slice::<Value>(raw) else {
            return self
                .error(
                    400,
                    kind,
                    "InvalidRequestContent",
                    "The request content is not JSON.",
                )
                .await;
        };
        if !self
            .check(
                id.kind.model(),
                Direction::Request,
                &body,
                &format!("PUT {id}"),
            )
            .await
        {
            return self
                .error(
                    400,
                    kind,
                    "ModelViolation",
                    "The body does not match Azure's model.",
                )
                .await;
        }
        let outcome = {
            let mut world = self.world.lock().unwrap();
            self.apply_put(&mut world, id, body)
        };
        match outcome {
            Ok((status, headers, answer)) => {
                self.answer(
                    status,
                    id.kind.model(),
                    answer,
                    &headers,
                    &format!("PUT {id}"),
                )
                .await
            }
            Err((status, code, message)) => self.error(status, kind, code, &message).await,
        }
    }

    #[allow(clippy::type_complexity)]
    fn apply_put(
        &self,
        world: &mut World,
        id: &ResourceId,
        mut body: Value,
    ) -> Result<(u16, Vec<(&'static str, String)>, Value), (u16, &'static str, String)> {
        let key = id.to_string().to_lowercase();
        if id.kind != ResourceType::ResourceGroup {
            let group = ResourceId::resource_group(&id.subscription, &id.resource_group);
            if world.find(&group.to_string()).is_none() {
                return Err((
                    404,
                    "ResourceGroupNotFound",
                    format!("Resource group '{}' could not be found.", id.resource_group),
                ));
            }
        }
        if let Some(parent) = &id.parent {
            let vnet = ResourceId::new(
                &id.subscription,
                &id.resource_group,
                ResourceType::VirtualNetwork,
                parent,
            );
            if world.find(&vnet.to_string()).is_none() {
                return Err((
                    404,
                    "ParentResourceNotFound",
                    format!("Parent resource '{parent}' not found."),
                ));
            }
        }
        // References must exist.
        let mut references: Vec<String> = Vec::new();
        collect_references(&body["properties"], &mut references);
        for reference in references {
            let base = base_resource(&reference);
            // A load balancer's rules name its own frontends, pools and probes.
            if base == key {
                continue;
            }
            if world.find(&base).is_none() {
                return Err((
                    400,
                    "InvalidResourceReference",
                    format!("Resource {reference} referenced by resource {id} was not found."),
                ));
            }
        }
        let existing = world.resources.get(&key).cloned();
        if existing.as_ref().is_some_and(|e| e.state == "Deleting") {
            return Err((
                409,
                "AnotherOperationInProgress",
                format!("Resource {id} is being deleted."),
            ));
        }
        let mut custom_data = None;
        let mut custom_data_sent = None;
        if id.kind == ResourceType::VirtualMachine {
            if let Some(data) = body["properties"]["osProfile"]["customData"].as_str() {
                custom_data = Some(format!("{:x}", fnv(data.as_bytes())));
                custom_data_sent = Some(data.to_string());
            }
            if let Some(existing) = &existing
                && custom_data.is_some()
                && existing.custom_data != custom_data
            {
                return Err((
                    409,
                    "PropertyChangeNotAllowed",
                    "Changing property 'customData' is not allowed.".into(),
                ));
            }
            for nic in body["properties"]["networkProfile"]["networkInterfaces"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let nic_id = nic["id"].as_str().unwrap_or_default();
                if let Some(other) = world.vm_of_nic(nic_id)
                    && !other.eq_ignore_ascii_case(&id.to_string())
                {
                    return Err((
                        400,
                        "NicInUse",
                        format!("Network interface {nic_id} is used by virtual machine {other}."),
                    ));
                }
            }
            if let Some(os) = body["properties"]["osProfile"].as_object_mut() {
                os.remove("customData");
            }
        }
        let address = match (&existing, id.kind) {
            (Some(e), _) => e.address.clone(),
            (None, ResourceType::NetworkInterface) => Some(world.assign_address(false)),
            (None, ResourceType::PublicIpAddress) => Some(world.assign_address(true)),
            _ => None,
        };
        let vm_id = existing.as_ref().and_then(|e| e.vm_id.clone()).or_else(|| {
            (id.kind == ResourceType::VirtualMachine).then(|| {
                let n = fastrand_u64();
                format!(
                    "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                    n >> 32,
                    n & 0xffff,
                    (n >> 16) & 0xfff,
                    (n >> 4) & 0xfff,
                    n & 0xffff_ffff_ffff
                )
            })
        });
        let created = existing.is_none();
        let synchronous = id.kind == ResourceType::ResourceGroup;
        let state = if synchronous {
            "Succeeded"
        } else if created {
            "Creating"
        } else {
            "Updating"
        };
        world.resources.insert(
            key.clone(),
            Stored {
                id: existing
                    .as_ref()
                    .map_or_else(|| id.to_string(), |e| e.id.clone()),
                kind: id.kind,
                body,
                state: state.into(),
                custom_data: custom_data
                    .or_else(|| existing.as_ref().and_then(|e| e.custom_data.clone())),
                custom_data_sent: custom_data_sent
                    .or_else(|| existing.as_ref().and_then(|e| e.custom_data_sent.clone())),
                address,
                vm_id,
            },
        );
        let headers = if synchronous {
            Vec::new()
        } else {
            self.start_operation(world, id, false)
        };
        let answer = world.answer(&world.resources[&key]);
        Ok((if created { 201 } else { 200 }, headers, answer))
    }

    async fn delete(&self, id: &ResourceId) -> Response<Full<Bytes>> {
        let outcome = {
            let mut world = self.world.lock().unwrap();
            self.apply_delete(&mut world, id)
        };
        match outcome {
            Ok(None) => respond(204, &Value::Null, &[]),
            Ok(Some(headers)) => respond(202, &Value::Null, &headers),
            Err((status, code, message)) => self.error(status, Some(id.kind), code, &message).await,
        }
    }

    #[allow(clippy::type_complexity)]
    fn apply_delete(
        &self,
        world: &mut World,
        id: &ResourceId,
    ) -> Result<Option<Vec<(&'static str, String)>>, (u16, &'static str, String)> {
        let key = id.to_string().to_lowercase();
        let Some(stored) = world.resources.get(&key).cloned() else {
            return Ok(None);
        };
        let full = stored.id.clone();
        let in_use = |code: &'static str, what: String| Err((400, code, what));
        match id.kind {
            ResourceType::Subnet => {
                let users = world.nic_configurations(|p| World::refers(&p["subnet"], &full));
                if !users.is_empty() {
                    return in_use(
                        "InUseSubnetCannotBeDeleted",
                        format!(
                            "Subnet {} is in use by {} and cannot be deleted.",
                            id.name,
                            users.join(", ")
                        ),
                    );
                }
            }
            ResourceType::VirtualNetwork => {
                let prefix = format!("{key}/subnets/");
                let users = world.nic_configurations(|p| {
                    p["subnet"]["id"]
                        .as_str()
                        .is_some_and(|s| s.to_lowercase().starts_with(&prefix))
                });
                if !users.is_empty() {
                    return in_use(
                        "InUseSubnetCannotBeDeleted",
                        format!("A subnet of {} is in use by {}.", id.name, users.join(", ")),
                    );
                }
            }
            ResourceType::NetworkInterface => {
                if let Some(vm) = world.vm_of_nic(&full) {
                    return in_use(
                        "NicInUse",
                        format!("Network interface {full} is attached to virtual machine {vm}."),
                    );
                }
            }
            ResourceType::NetworkSecurityGroup
                if world.of_kind(ResourceType::Subnet).iter().any(|s| {
                    World::refers(&s.body["properties"]["networkSecurityGroup"], &full)
                }) =>
            {
                return in_use(
                    "InUseNetworkSecurityGroupCannotBeDeleted",
                    format!("Network security group {full} is in use by a subnet."),
                );
            }
            ResourceType::NatGateway => {
                let answer = world.answer(&stored);
                if let Some(subnet) = answer["properties"]["subnets"][0]["id"].as_str() {
                    return in_use(
                        "InUseNatGatewayCannotBeDeleted",
                        format!("NAT gateway {full} is in use by subnet {subnet}."),
                    );
                }
            }
            ResourceType::PublicIpAddress => {
                let answer = world.answer(&stored);
                if let Some(gateway) = answer["properties"]["natGateway"]["id"].as_str() {
                    return in_use(
                        "PublicIPAddressCannotBeDeleted",
                        format!("Public IP address {full} is in use by NAT gateway {gateway}."),
                    );
                }
                if let Some(user) = answer["properties"]["ipConfiguration"]["id"].as_str() {
                    return in_use(
                        "PublicIPAddressCannotBeDeleted",
                        format!("Public IP address {full} is in use by {user}."),
                    );
                }
            }
            ResourceType::Disk => {
                let answer = world.answer(&stored);
                if let Some(vm) = answer["managedBy"].as_str() {
                    return Err((
                        409,
                        "OperationNotAllowed",
                        format!("Disk {} is attached to VM {vm}.", id.name),
                    ));
                }
            }
            _ => {}
        }
        if let Some(r) = world.resources.get_mut(&key) {
            r.state = "Deleting".into();
        }
        Ok(Some(self.start_operation(world, id, true)))
    }
}

/// Every `id` of a sub-resource reference in `value` (not the resource's own children's).
fn collect_references(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match key.as_str() {
                    "subnet" | "networkSecurityGroup" | "publicIPAddress" | "natGateway" => {
                        if let Some(id) = v["id"].as_str() {
                            out.push(id.to_string());
                        }
                    }
                    "loadBalancerBackendAddressPools" | "publicIpAddresses" => {
                        for pool in v.as_array().cloned().unwrap_or_default() {
                            if let Some(id) = pool["id"].as_str() {
                                out.push(id.to_string());
                            }
                        }
                    }
                    "networkInterfaces" => {
                        for nic in v.as_array().cloned().unwrap_or_default() {
                            if let Some(id) = nic["id"].as_str() {
                                out.push(id.to_string());
                            }
                        }
                    }
                    _ => collect_references(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_references(v, out)),
        _ => {}
    }
}

/// The resource a reference is in (`<lb>/backendAddressPools/<pool>` → `<lb>`), lower-cased.
fn base_resource(reference: &str) -> String {
    let lower = reference.to_lowercase();
    for child in [
        "/backendaddresspools/",
        "/frontendipconfigurations/",
        "/probes/",
        "/ipconfigurations/",
    ] {
        if let Some(at) = lower.find(child) {
            return lower[..at].to_string();
        }
    }
    lower
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).to_string()
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn fastrand_u64() -> u64 {
    static SEED: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let n = SEED.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    fnv(&n.to_le_bytes()) ^ u64::from(std::process::id())
}
