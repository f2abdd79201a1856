//! An ARM test server of the project's own: stateful, on 127.0.0.1 over TLS, modelled on the
//! public ARM REST reference for the resources the provider manages.
//!
//! - Resource IDs by path, the kind's api-version required; a scale set answered with an `etag`
//!   that changes with it, and a PUT with `If-Match` refused `412` unless it still matches; PUT
//!   answers `201` (new) or `200` with `provisioningState` `Creating`/`Updating` and an
//!   `Azure-AsyncOperation` URL; the operation ends (`Succeeded`) after [`Faults::operation_time`] whether or not anyone polls;
//!   resource groups are made at once. GET answers the resource with what ARM fills in (IDs of
//!   children, addresses, the subnets' IP configurations, a pool's members, the NIC's VM, the
//!   VM's OS disk, when a VM or scale set was made); `customData` is never answered, `userData`
//!   only to `$expand=userData`.
//! - A kind's resources in a group are listed (`GET .../providers/<namespace>/<collection>`) as
//!   `{"value": [...], "nextLink"}`, [`PAGE_SIZE`] a page, each answered as GET answers it and
//!   the next page's `$skiptoken` on the server itself. VMs are filtered by
//!   `'virtualMachineScaleSet/id' eq '<ID>'` (IDs compared without case); any other `$filter`
//!   is refused `400 InvalidParameter`.
//! - DELETE answers `202` + operation (`204` for nothing), the resource `Deleting` (and still
//!   listed) until it ends; a resource group takes everything in it; a VM takes the NICs and
//!   disks it was told to (`deleteOption: Delete`) and leaves the others unattached.
//! - Flexible scale sets: a PUT needs `orchestrationMode: Flexible`, `platformFaultDomainCount`,
//!   `sku.name` and `sku.capacity`, and a VM profile with a network API version and NIC
//!   configurations. At once the set is brought to its capacity: each missing VM is made
//!   (`<set>_<8 hex>`, its NIC `<vm>-nic` with an address, its OS disk `<vm>_OsDisk_1_<32 hex>`
//!   once made; the set's VM size, image, admin, zone, `customData` and `userData` as the model
//!   had them then; none of the set's tags) and the newest surplus VMs are deleted; they settle
//!   when the PUT's operation ends. A new model never touches the VMs there are. `POST
//!   <set>/delete` with `instanceIds` (VM names) deletes those VMs and lowers `sku.capacity` by
//!   as many at once, never replacing them; a name that is not a VM of the set is refused `400
//!   InvalidParameter` and nothing is done. A VM deleted on its own lowers its set's capacity
//!   too; a deleted set takes its VMs. A PUT or POST while another operation on the set is under
//!   way is refused `409 OperationNotAllowed`.
//! - ARM's dependency rules: a subnet (or network) with IP configurations in it, a NIC attached
//!   to a VM, a security group used by a subnet, a public IP used by a frontend or NIC, a disk
//!   attached to a VM cannot be deleted; references must exist; a VM's `customData` cannot
//!   change.
//! - A client-credentials token endpoint (`/<tenant>/oauth2/v2.0/token`); every ARM request
//!   must carry a token it issued.
//! - Faults on demand ([`Faults`]), by method and kind ([`Target`]): throttling (`429` +
//!   `Retry-After`), conflicts (`409`), failed and vanished operations, slow operations, lost
//!   responses (the request is carried out, the connection closed unanswered), a low
//!   remaining-request budget; or at random from a seed ([`Chaos`]), with scale-set VMs that
//!   show in listings only a while after they were made.
//! - **Every request body the provider sends and every body the server answers is checked
//!   against Azure's own models** ([`ModelChecker`]); a mismatch is recorded
//!   ([`ArmServer::violations`]) and answered `400 ModelViolation`. A listing's envelope has no
//!   model of Azure's; each resource in it is checked.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use provider_azure::arm::{ResourceId, ResourceIdError, ResourceType};
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

/// The most resources one page of a listing holds.
pub const PAGE_SIZE: usize = 50;

/// The largest capacity of a Flexible scale set.
const MAX_CAPACITY: u64 = 1000;

/// Which requests a fault applies to: an action (`POST <id>/<action>`) is a POST of its
/// resource's kind, a listing a GET of the kind listed.
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
    /// Seeded random faults on every ARM request, and listings that lag (a chaos run).
    pub chaos: Option<Chaos>,
}

/// A random fault [`Chaos`] gave a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChaosFault {
    /// `429` with `Retry-After: 1`.
    Throttle,
    /// `409 AnotherOperationInProgress` (writes only).
    Conflict,
    /// Carried out, its connection closed unanswered.
    LoseResponse,
    /// Its operation fails (writes that make no VM: a failed VM stays failed until its Machine
    /// is deleted, which is a user's or a health check's decision, not a fault's).
    FailOperation,
    /// Its operation's status answers `404` while the operation completes.
    VanishOperation,
}

/// Seeded random faults: each ARM read (not a token request, not an operation's status) meets
/// one with probability `rate`, each write (PUT, POST, DELETE: far fewer) with `write_rate`; a
/// new scale-set VM shows in listings only after up to `list_lag` (ARM's listings are
/// eventually consistent; a GET of the VM finds it at once).
#[derive(Debug)]
pub struct Chaos {
    rate: f64,
    write_rate: f64,
    list_lag: Duration,
    state: u64,
    /// What was injected, by fault.
    pub injected: BTreeMap<ChaosFault, u64>,
}

impl Chaos {
    /// Faults at `rate` of reads and `write_rate` of writes (0 to 1) from `seed`, listings
    /// lagging up to `list_lag`.
    pub fn new(seed: u64, rate: f64, write_rate: f64, list_lag: Duration) -> Self {
        Self {
            rate,
            write_rate,
            list_lag,
            state: seed,
            injected: BTreeMap::new(),
        }
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The fault of the next request, `method` on `kind`, if it meets one.
    fn pick(&mut self, method: &Method, kind: Option<ResourceType>) -> Option<ChaosFault> {
        let rate = if *method == Method::GET {
            self.rate
        } else {
            self.write_rate
        };
        if self.unit() >= rate {
            return None;
        }
        let makes_vms = matches!(
            kind,
            Some(ResourceType::VirtualMachine | ResourceType::VirtualMachineScaleSet)
        ) && *method != Method::DELETE;
        let choices: &[ChaosFault] = if *method == Method::GET {
            &[ChaosFault::Throttle, ChaosFault::LoseResponse]
        } else if makes_vms {
            &[
                ChaosFault::Throttle,
                ChaosFault::Conflict,
                ChaosFault::LoseResponse,
                ChaosFault::VanishOperation,
            ]
        } else {
            &[
                ChaosFault::Throttle,
                ChaosFault::Conflict,
                ChaosFault::LoseResponse,
                ChaosFault::FailOperation,
                ChaosFault::VanishOperation,
            ]
        };
        let fault = choices[(self.next() % choices.len() as u64) as usize];
        *self.injected.entry(fault).or_default() += 1;
        Some(fault)
    }

    /// How long from now a VM made now stays out of listings.
    fn lag(&mut self) -> Duration {
        self.list_lag.mul_f64(self.unit())
    }
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
            chaos: None,
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
    /// Its body as last written, without read-only properties, `customData` or `userData`.
    pub body: Value,
    /// `Creating`, `Updating`, `Succeeded`, `Failed`, `Deleting`.
    pub state: String,
    /// A digest of its `customData` (a VM's, a scale set's model's).
    custom_data: Option<String>,
    /// Its `customData` as sent (never answered; what the VM boots with).
    custom_data_sent: Option<String>,
    /// Its `userData` (a VM's, a scale set's model's), answered only when expanded.
    user_data: Option<String>,
    /// An address ARM assigned (a NIC's private, a public IP's public one).
    address: Option<String>,
    /// A VM's `vmId`, a scale set's `uniqueId`.
    vm_id: Option<String>,
    /// When a VM or scale set was made (`timeCreated`).
    created: Option<String>,
    /// The order it was made in (the newest has the highest).
    serial: u64,
    /// Not in listings before then (a lagging listing, [`Chaos`]).
    listed_after: Option<Instant>,
}

impl Stored {
    fn new(id: String, kind: ResourceType, body: Value, state: &str) -> Self {
        Self {
            id,
            kind,
            body,
            state: state.into(),
            custom_data: None,
            custom_data_sent: None,
            user_data: None,
            address: None,
            vm_id: None,
            created: None,
            serial: 0,
            listed_after: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Succeed,
    Fail,
}

/// The request that started an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Put,
    Delete,
    Post,
}

impl Verb {
    fn method(self) -> Method {
        match self {
            Self::Put => Method::PUT,
            Self::Delete => Method::DELETE,
            Self::Post => Method::POST,
        }
    }
}

/// What an operation's end does to a resource it settles (its target, a scale set's VMs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// Made: `Succeeded` (or `Failed`).
    Make,
    /// Deleted: gone (or `Failed`).
    Remove,
}

/// An operation under way or ended.
#[derive(Clone, Debug)]
struct Operation {
    /// The resource's key.
    target: String,
    verb: Verb,
    /// The other resources that settle with it (a scale set's VMs), by key.
    members: Vec<(String, Change)>,
    done_at: Instant,
    outcome: Outcome,
    vanished: bool,
    ended: bool,
}

/// What `$expand` asks a GET to add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expand {
    Nothing,
    UserData,
}

impl Expand {
    fn from_query(query: &str) -> Self {
        let asked = query_param(query, "$expand").unwrap_or_default();
        if asked
            .split(',')
            .any(|e| e.trim().eq_ignore_ascii_case("userData"))
        {
            Self::UserData
        } else {
            Self::Nothing
        }
    }
}

/// What a request's path names.
#[derive(Clone, Debug)]
enum Route {
    /// A resource, by ID.
    Resource(ResourceId),
    /// An action on a resource (`POST <id>/<action>`).
    Action(ResourceId, String),
    /// The resources of a kind in a resource group (the group's ID).
    Collection(ResourceId, ResourceType),
}

impl Route {
    fn parse(path: &str) -> Result<Self, ResourceIdError> {
        let refused = match ResourceId::parse(path) {
            Ok(id) => return Ok(Self::Resource(id)),
            Err(e) => e,
        };
        let Some((prefix, last)) = path.rsplit_once('/') else {
            return Err(refused);
        };
        if let Some((group, namespace)) = prefix.rsplit_once('/')
            && let Some(group) = group
                .len()
                .checked_sub("/providers".len())
                .filter(|at| group[*at..].eq_ignore_ascii_case("/providers"))
                .map(|at| &group[..at])
            && let Ok(group) = ResourceId::parse(group)
            && group.kind == ResourceType::ResourceGroup
            && let Some(kind) = ResourceType::from_segments(Some(namespace), None, last)
        {
            return Ok(Self::Collection(group, kind));
        }
        match ResourceId::parse(prefix) {
            Ok(id) if id.kind != ResourceType::ResourceGroup => {
                Ok(Self::Action(id, last.to_string()))
            }
            _ => Err(refused),
        }
    }

    fn kind(&self) -> ResourceType {
        match self {
            Self::Resource(id) | Self::Action(id, _) => id.kind,
            Self::Collection(_, kind) => *kind,
        }
    }
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
    next_serial: u64,
}

impl World {
    /// How many `method` requests went to resources of `kind`, their actions or their
    /// listings.
    pub fn count(&self, method: &str, kind: ResourceType) -> usize {
        self.requests
            .iter()
            .filter(|(m, path, _)| {
                m == method
                    && Route::parse(path).is_ok_and(|route| route.kind() == kind)
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

    /// The `userData` (base64) of VM or scale set `id`.
    pub fn user_data(&self, id: &str) -> Option<String> {
        self.find(id).and_then(|r| r.user_data.clone())
    }

    /// The VMs of scale set `id`, oldest first (those being deleted too).
    pub fn instances(&self, id: &str) -> Vec<&Stored> {
        let mut vms: Vec<&Stored> = self
            .of_kind(ResourceType::VirtualMachine)
            .into_iter()
            .filter(|vm| Self::refers(&vm.body["properties"]["virtualMachineScaleSet"], id))
            .collect();
        vms.sort_by_key(|vm| vm.serial);
        vms
    }

    /// Whether an operation on `key` is under way.
    fn busy(&self, key: &str) -> bool {
        self.operations
            .values()
            .any(|op| !op.ended && op.target == key)
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
            let target = match op.verb {
                Verb::Delete => Change::Remove,
                Verb::Put | Verb::Post => Change::Make,
            };
            for (key, change) in op.members.iter().chain([&(op.target.clone(), target)]) {
                self.settle(key, *change, &op.outcome);
            }
        }
    }

    /// Ends what an operation did to `key`. A resource being deleted meanwhile is left to the
    /// deletion.
    fn settle(&mut self, key: &str, change: Change, outcome: &Outcome) {
        let Some(r) = self.resources.get_mut(key) else {
            return;
        };
        match (change, outcome) {
            (Change::Make, _) if r.state == "Deleting" => {}
            (Change::Remove, Outcome::Succeed) => self.remove(key),
            (Change::Make, Outcome::Succeed) => {
                r.state = "Succeeded".into();
                self.materialize(key);
            }
            (_, Outcome::Fail) => r.state = "Failed".into(),
        }
    }

    /// What a VM's success makes: its OS and data disks (made as the VM says: from its image,
    /// empty, ...).
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
        let os = &storage["osDisk"];
        let mut disks = vec![(
            os["name"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| format!("{}_OsDisk_1", id.name)),
            os["diskSizeGB"].as_i64().unwrap_or(30),
            os["createOption"]
                .as_str()
                .unwrap_or("FromImage")
                .to_string(),
        )];
        for disk in storage["dataDisks"].as_array().cloned().unwrap_or_default() {
            if let Some(name) = disk["name"].as_str() {
                disks.push((
                    name.to_string(),
                    disk["diskSizeGB"].as_i64().unwrap_or(0),
                    disk["createOption"].as_str().unwrap_or("Empty").to_string(),
                ));
            }
        }
        for (name, size, create) in disks {
            let disk_id = ResourceId::new(
                &id.subscription,
                &id.resource_group,
                ResourceType::Disk,
                &name,
            );
            let disk_key = disk_id.to_string().to_lowercase();
            self.resources.entry(disk_key).or_insert_with(|| {
                Stored::new(
                    disk_id.to_string(),
                    ResourceType::Disk,
                    json!({
                        "location": vm.body["location"],
                        "properties": {"diskSizeGB": size, "creationData": {"createOption": create}},
                        "tags": vm.body.get("tags").cloned().unwrap_or(json!({})),
                    }),
                    "Succeeded",
                )
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
            ResourceType::VirtualMachineScaleSet => {
                let left: Vec<String> = self
                    .instances(&removed.id)
                    .iter()
                    .map(|vm| vm.id.to_lowercase())
                    .collect();
                for vm in left {
                    self.remove(&vm);
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

    /// The resource as ARM answers a plain GET.
    fn answer(&self, stored: &Stored) -> Value {
        self.answer_expanded(stored, Expand::Nothing)
    }

    /// The resource as ARM answers it, with what `expand` adds.
    fn answer_expanded(&self, stored: &Stored, expand: Expand) -> Value {
        let mut body = stored.body.clone();
        let id = stored.id.clone();
        let parsed = ResourceId::parse(&id).ok();
        let name = parsed.as_ref().map(|p| p.name.clone()).unwrap_or_default();
        body["id"] = json!(id);
        body["name"] = json!(name);
        body["type"] = json!(type_name(stored.kind));
        if stored.kind == ResourceType::VirtualMachineScaleSet {
            body["etag"] = json!(etag_of(stored));
        }
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
                if let Some(created) = &stored.created {
                    properties["timeCreated"] = json!(created);
                }
                if let (Expand::UserData, Some(data)) = (expand, &stored.user_data) {
                    properties["userData"] = json!(data);
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
            ResourceType::VirtualMachineScaleSet => {
                properties["uniqueId"] = json!(stored.vm_id);
                if let Some(created) = &stored.created {
                    properties["timeCreated"] = json!(created);
                }
                if let (Expand::UserData, Some(data)) = (expand, &stored.user_data) {
                    properties["virtualMachineProfile"]["userData"] = json!(data);
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

/// Flexible scale sets: their VMs, made and deleted as the capacity asks.
impl World {
    /// Brings scale set `key` to its capacity: the missing VMs made (`Creating`), the newest of
    /// the surplus ones `Deleting`. Returns them, to settle with the operation that changed it.
    fn resize(&mut self, key: &str) -> Vec<(String, Change)> {
        let Some(set) = self.resources.get(key).cloned() else {
            return Vec::new();
        };
        let capacity = set.body["sku"]["capacity"].as_u64().unwrap_or(0);
        let mut live: Vec<(u64, String)> = self
            .instances(&set.id)
            .into_iter()
            .filter(|vm| vm.state != "Deleting")
            .map(|vm| (vm.serial, vm.id.to_lowercase()))
            .collect();
        let count = live.len() as u64;
        if count > capacity {
            live.sort_by_key(|(serial, _)| Reverse(*serial));
            live.truncate((count - capacity) as usize);
            return live
                .into_iter()
                .map(|(_, vm)| {
                    if let Some(vm) = self.resources.get_mut(&vm) {
                        vm.state = "Deleting".into();
                    }
                    (vm, Change::Remove)
                })
                .collect();
        }
        (count..capacity)
            .filter_map(|_| self.make_instance(&set))
            .map(|vm| (vm, Change::Make))
            .collect()
    }

    /// Makes one VM of scale set `set` from its model as it is now, with its NICs; returns the
    /// VM's key.
    fn make_instance(&mut self, set: &Stored) -> Option<String> {
        let set_id = ResourceId::parse(&set.id).ok()?;
        let model = &set.body["properties"]["virtualMachineProfile"];
        let location = &set.body["location"];
        let id = loop {
            let name = format!("{}_{:08x}", set_id.name, fastrand_u64() & 0xffff_ffff);
            let id = ResourceId::new(
                &set_id.subscription,
                &set_id.resource_group,
                ResourceType::VirtualMachine,
                &name,
            );
            if self.find(&id.to_string()).is_none() {
                break id;
            }
        };
        let mut nics = Vec::new();
        for (index, configuration) in model["networkProfile"]["networkInterfaceConfigurations"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let name = match index {
                0 => format!("{}-nic", id.name),
                n => format!("{}-nic{n}", id.name),
            };
            let nic = ResourceId::new(
                &id.subscription,
                &id.resource_group,
                ResourceType::NetworkInterface,
                &name,
            );
            let mut stored = Stored::new(
                nic.to_string(),
                ResourceType::NetworkInterface,
                nic_of(&configuration, location),
                "Succeeded",
            );
            stored.address = Some(self.assign_address(false));
            stored.serial = self.next_serial();
            self.resources
                .insert(nic.to_string().to_lowercase(), stored);
            let properties = &configuration["properties"];
            nics.push(json!({"id": nic.to_string(), "properties": {
                "primary": properties["primary"].as_bool().unwrap_or(index == 0),
                "deleteOption": properties["deleteOption"].as_str().unwrap_or("Detach"),
            }}));
        }
        let mut os = json!({
            "computerName": format!(
                "{}{}",
                model["osProfile"]["computerNamePrefix"]
                    .as_str()
                    .unwrap_or(&set_id.name),
                base36(fastrand_u64(), 6)
            ),
        });
        copy(
            &model["osProfile"],
            &mut os,
            &[
                "adminUsername",
                "linuxConfiguration",
                "windowsConfiguration",
                "secrets",
                "allowExtensionOperations",
                "requireGuestProvisionSignal",
            ],
        );
        let mut properties = json!({
            "virtualMachineScaleSet": {"id": set.id},
            "hardwareProfile": {"vmSize": set.body["sku"]["name"]},
            "storageProfile": storage_of(&model["storageProfile"], &id.name),
            "osProfile": os,
            "networkProfile": {"networkInterfaces": nics},
        });
        copy(
            model,
            &mut properties,
            &[
                "securityProfile",
                "diagnosticsProfile",
                "priority",
                "evictionPolicy",
                "billingProfile",
                "scheduledEventsProfile",
                "licenseType",
                "capacityReservation",
            ],
        );
        let mut body = json!({"location": location, "properties": properties});
        if let Some(zone) = self.emptiest_zone(set) {
            body["zones"] = json!([zone]);
        }
        let mut vm = Stored::new(
            id.to_string(),
            ResourceType::VirtualMachine,
            body,
            "Creating",
        );
        vm.custom_data = set.custom_data.clone();
        vm.custom_data_sent = set.custom_data_sent.clone();
        vm.user_data = set.user_data.clone();
        vm.vm_id = Some(new_uuid());
        vm.created = Some(now());
        vm.serial = self.next_serial();
        vm.listed_after = self
            .faults
            .chaos
            .as_mut()
            .map(|chaos| Instant::now() + chaos.lag());
        let key = id.to_string().to_lowercase();
        self.resources.insert(key.clone(), vm);
        Some(key)
    }

    /// The zone of scale set `set` with the fewest of its VMs (`None` for a regional set).
    fn emptiest_zone(&self, set: &Stored) -> Option<String> {
        let zones: Vec<&str> = set.body["zones"]
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let vms = self.instances(&set.id);
        zones
            .into_iter()
            .min_by_key(|zone| {
                vms.iter()
                    .filter(|vm| vm.state != "Deleting" && vm.body["zones"][0] == *zone)
                    .count()
            })
            .map(str::to_string)
    }

    /// The key of the scale set VM `vm` belongs to, if any.
    fn scale_set_of(&self, vm: &Stored) -> Option<String> {
        vm.body["properties"]["virtualMachineScaleSet"]["id"]
            .as_str()
            .map(str::to_lowercase)
            .filter(|key| self.resources.contains_key(key))
    }

    /// Lowers scale set `key`'s capacity by `by`.
    fn lower_capacity(&mut self, key: &str, by: u64) {
        if let Some(set) = self.resources.get_mut(key) {
            let capacity = set.body["sku"]["capacity"].as_u64().unwrap_or(0);
            set.body["sku"]["capacity"] = json!(capacity.saturating_sub(by));
        }
    }

    fn next_serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }
}

/// The NIC a scale set's NIC configuration makes (a `network:NetworkInterface` body).
fn nic_of(configuration: &Value, location: &Value) -> Value {
    let properties = &configuration["properties"];
    let ip_configurations: Vec<Value> = properties["ipConfigurations"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(index, ip)| {
            let mut made = json!({
                "privateIPAllocationMethod": "Dynamic",
                "primary": ip["properties"]["primary"].as_bool().unwrap_or(index == 0),
            });
            copy(
                &ip["properties"],
                &mut made,
                &[
                    "subnet",
                    "privateIPAddressVersion",
                    "loadBalancerBackendAddressPools",
                ],
            );
            json!({"name": ip["name"], "properties": made})
        })
        .collect();
    let mut made = json!({"ipConfigurations": ip_configurations});
    copy(
        properties,
        &mut made,
        &[
            "networkSecurityGroup",
            "enableAcceleratedNetworking",
            "enableIPForwarding",
        ],
    );
    json!({"location": location, "properties": made})
}

/// A VM's `storageProfile` from a scale set model's: its image, its OS disk `<vm>_OsDisk_1_<32
/// hex>` and data disks `<vm>_disk<lun + 2>_<32 hex>`, deleted with the VM unless the model
/// says `Detach`.
fn storage_of(model: &Value, vm: &str) -> Value {
    let disk = |from: &Value, name: String, keys: &[&str]| {
        let mut disk = json!({
            "name": name,
            "deleteOption": from["deleteOption"].as_str().unwrap_or("Delete"),
        });
        copy(from, &mut disk, keys);
        if let Some(kind) = from["managedDisk"]["storageAccountType"].as_str() {
            disk["managedDisk"] = json!({"storageAccountType": kind});
        }
        disk
    };
    let os = disk(
        &model["osDisk"],
        format!(
            "{vm}_OsDisk_1_{:016x}{:016x}",
            fastrand_u64(),
            fastrand_u64()
        ),
        &[
            "osType",
            "caching",
            "writeAcceleratorEnabled",
            "createOption",
            "diffDiskSettings",
            "diskSizeGB",
        ],
    );
    let data: Vec<Value> = model["dataDisks"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|d| {
            let lun = d["lun"].as_u64().unwrap_or(0);
            disk(
                d,
                format!(
                    "{vm}_disk{}_{:016x}{:016x}",
                    lun + 2,
                    fastrand_u64(),
                    fastrand_u64()
                ),
                &[
                    "lun",
                    "caching",
                    "writeAcceleratorEnabled",
                    "createOption",
                    "diskSizeGB",
                ],
            )
        })
        .collect();
    let mut storage = json!({"osDisk": os});
    copy(model, &mut storage, &["imageReference"]);
    if !data.is_empty() {
        storage["dataDisks"] = json!(data);
    }
    storage
}

/// Copies `keys` of `from` that are set into `to`.
fn copy(from: &Value, to: &mut Value, keys: &[&str]) {
    for key in keys {
        if let Some(value) = from.get(*key).filter(|v| !v.is_null()) {
            to[*key] = value.clone();
        }
    }
}

/// What a Flexible scale set's PUT must say, as ARM checks it.
fn check_scale_set(body: &Value) -> Result<(), (u16, &'static str, String)> {
    let invalid = |message: String| Err((400, "InvalidParameter", message));
    let properties = &body["properties"];
    let mode = properties["orchestrationMode"].as_str().unwrap_or_default();
    if mode != "Flexible" {
        return invalid(format!(
            "Orchestration mode '{mode}' is not supported: this server models Flexible scale \
             sets only."
        ));
    }
    let model = &properties["virtualMachineProfile"];
    let configurations = &model["networkProfile"]["networkInterfaceConfigurations"];
    for (path, missing) in [
        (
            "properties.platformFaultDomainCount",
            properties["platformFaultDomainCount"].as_u64().is_none(),
        ),
        ("sku.name", body["sku"]["name"].as_str().is_none()),
        ("sku.capacity", body["sku"]["capacity"].as_u64().is_none()),
        ("properties.virtualMachineProfile", !model.is_object()),
        (
            "properties.virtualMachineProfile.networkProfile.networkApiVersion",
            model["networkProfile"]["networkApiVersion"]
                .as_str()
                .is_none(),
        ),
        (
            "properties.virtualMachineProfile.networkProfile.networkInterfaceConfigurations",
            configurations.as_array().is_none_or(Vec::is_empty),
        ),
    ] {
        if missing {
            return invalid(format!("Required parameter '{path}' is missing (null)."));
        }
    }
    let capacity = body["sku"]["capacity"].as_u64().unwrap_or(0);
    if capacity > MAX_CAPACITY {
        return invalid(format!(
            "The capacity {capacity} is more than the {MAX_CAPACITY} VMs a Flexible scale set \
             holds."
        ));
    }
    let ip_configurations = configurations
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| {
            c["properties"]["ipConfigurations"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        });
    for ip in ip_configurations {
        if ip["properties"]["subnet"]["id"].as_str().is_none() {
            return invalid(format!(
                "IP configuration '{}' names no subnet.",
                ip["name"].as_str().unwrap_or_default()
            ));
        }
    }
    Ok(())
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
        let route = match Route::parse(path) {
            Ok(route) => route,
            Err(e) => {
                return Ok(self
                    .error(400, None, "InvalidResourceType", &e.to_string())
                    .await);
            }
        };
        let kind = Some(route.kind());
        let api_version = query_param(query, "api-version").unwrap_or_default();
        if api_version != route.kind().api_version() {
            self.world.lock().unwrap().violations.push(format!(
                "{} {path}: api-version {api_version:?}, not {}",
                parts.method,
                route.kind().api_version()
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
            let chaos = faults
                .chaos
                .as_mut()
                .and_then(|c| c.pick(&parts.method, kind));
            let method = match parts.method {
                Method::PUT => Some("PUT"),
                Method::POST => Some("POST"),
                Method::DELETE => Some("DELETE"),
                _ => None,
            };
            let target = Target { method, kind };
            match chaos {
                Some(ChaosFault::FailOperation) => faults.fail_operation.push(target),
                Some(ChaosFault::VanishOperation) => faults.vanish_operation.push(target),
                _ => {}
            }
            (
                chaos == Some(ChaosFault::Throttle)
                    || take_count(&mut faults.throttle, &parts.method, kind),
                parts.method != Method::GET
                    && (chaos == Some(ChaosFault::Conflict)
                        || take_count(&mut faults.conflict, &parts.method, kind)),
                chaos == Some(ChaosFault::LoseResponse)
                    || take_once(&mut faults.lose_response, &parts.method, kind),
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
        let mut response = match (&parts.method, &route) {
            (&Method::GET, Route::Resource(id)) => self.get(id, Expand::from_query(query)).await,
            (&Method::PUT, Route::Resource(id)) => {
                match parts.headers.get("if-match").and_then(|v| v.to_str().ok()) {
                    Some(wanted) if !self.etag_matches(id, wanted) => {
                        self.error(
                            412,
                            kind,
                            "PreconditionFailed",
                            "The resource was changed since its etag was read (If-Match).",
                        )
                        .await
                    }
                    _ => self.put(id, body).await,
                }
            }
            (&Method::DELETE, Route::Resource(id)) => self.delete(id).await,
            (&Method::POST, Route::Action(id, action)) => self.post(id, action, body).await,
            (&Method::GET, Route::Collection(group, kind)) => {
                self.list(group, *kind, path, query).await
            }
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

    /// Whether resource `id` exists with etag `wanted` (`*`: with any).
    fn etag_matches(&self, id: &ResourceId, wanted: &str) -> bool {
        let world = self.world.lock().unwrap();
        world
            .find(&id.to_string())
            .is_some_and(|stored| wanted == "*" || etag_of(stored) == wanted)
    }

    async fn get(&self, id: &ResourceId, expand: Expand) -> Response<Full<Bytes>> {
        let found = {
            let world = self.world.lock().unwrap();
            world
                .find(&id.to_string())
                .map(|s| world.answer_expanded(s, expand))
        };
        match found {
            Some(body) => {
                self.answer(200, id.kind.model(), body, &[], &format!("GET {id}"))
                    .await
            }
            None => self.not_found(id).await,
        }
    }

    /// A page of the resources of `kind` in `group` (`path`: the listing's), from after the
    /// `$skiptoken`'s name, the next page's link on this server.
    async fn list(
        &self,
        group: &ResourceId,
        kind: ResourceType,
        path: &str,
        query: &str,
    ) -> Response<Full<Bytes>> {
        let what = format!("GET {path}");
        let scale_set = match query_param(query, "$filter") {
            None => None,
            Some(filter) => match scale_set_filter(kind, &filter) {
                Some(id) => Some(id),
                None => {
                    return self
                        .error(
                            400,
                            Some(kind),
                            "InvalidParameter",
                            &format!(
                                "The $filter '{filter}' is not supported: {} are filtered by \
                                 'virtualMachineScaleSet/id' eq '<scale set ID>' only.",
                                kind.collection()
                            ),
                        )
                        .await;
                }
            },
        };
        let after = query_param(query, "$skiptoken").map(|t| t.to_lowercase());
        let now = Instant::now();
        let page = {
            let world = self.world.lock().unwrap();
            world.find(&group.to_string()).map(|_| {
                let prefix = format!(
                    "{}/providers/{}/{}/",
                    group.to_string().to_lowercase(),
                    kind.namespace().unwrap_or_default().to_lowercase(),
                    kind.collection().to_lowercase()
                );
                let mut found = world
                    .resources
                    .iter()
                    .filter_map(|(key, r)| Some((key.strip_prefix(&prefix)?, r)))
                    .filter(|(name, r)| {
                        r.kind == kind
                            && r.listed_after.is_none_or(|t| t <= now)
                            && !name.contains('/')
                            && after.as_deref().is_none_or(|after| *name > after)
                            && scale_set.as_deref().is_none_or(|set| {
                                World::refers(&r.body["properties"]["virtualMachineScaleSet"], set)
                            })
                    })
                    .take(PAGE_SIZE + 1)
                    .map(|(name, r)| (name.to_string(), world.answer(r)))
                    .collect::<Vec<_>>();
                let more = found.len() > PAGE_SIZE;
                found.truncate(PAGE_SIZE);
                let next = more
                    .then(|| found.last().map(|(name, _)| name.clone()))
                    .flatten();
                (found.into_iter().map(|(_, v)| v).collect::<Vec<_>>(), next)
            })
        };
        let Some((values, next)) = page else {
            return self
                .error(
                    404,
                    Some(kind),
                    "ResourceGroupNotFound",
                    &format!(
                        "Resource group '{}' could not be found.",
                        group.resource_group
                    ),
                )
                .await;
        };
        for value in &values {
            self.check(kind.model(), Direction::Response, value, &what)
                .await;
        }
        let mut body = json!({"value": values});
        if let Some(last) = next {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|p| {
                    let key = percent_decode(p.split('=').next().unwrap_or_default());
                    !key.eq_ignore_ascii_case("$skiptoken")
                })
                .collect();
            body["nextLink"] = json!(format!(
                "{}{path}?{}&$skiptoken={}",
                self.url,
                kept.join("&"),
                percent_encode(&last)
            ));
        }
        respond(200, &body, &[])
    }

    /// `POST <id>/<action>`: the deletion of named VMs of a scale set.
    async fn post(&self, id: &ResourceId, action: &str, raw: &[u8]) -> Response<Full<Bytes>> {
        let kind = Some(id.kind);
        if id.kind != ResourceType::VirtualMachineScaleSet || !action.eq_ignore_ascii_case("delete")
        {
            return self
                .error(
                    404,
                    kind,
                    "NotFound",
                    &format!(
                        "No action '{action}' on {} on this server.",
                        type_name(id.kind)
                    ),
                )
                .await;
        }
        let model = "compute:VirtualMachineScaleSetVMInstanceRequiredIDs";
        let what = format!("POST {id}/{action}");
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
        if !self.check(model, Direction::Request, &body, &what).await {
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
            self.delete_instances(&mut world, id, &body)
        };
        match outcome {
            Ok(headers) => respond(202, &Value::Null, &headers),
            Err((status, code, message)) => self.error(status, kind, code, &message).await,
        }
    }

    /// Marks the VMs `body` names `Deleting` and lowers the scale set's capacity by as many;
    /// refuses them all when one is not a VM of the set.
    #[allow(clippy::type_complexity)]
    fn delete_instances(
        &self,
        world: &mut World,
        id: &ResourceId,
        body: &Value,
    ) -> Result<Vec<(&'static str, String)>, (u16, &'static str, String)> {
        let key = id.to_string().to_lowercase();
        let Some(set) = world.resources.get(&key).cloned() else {
            return Err((
                404,
                "ResourceNotFound",
                format!(
                    "The Resource '{}/{}' under resource group '{}' was not found.",
                    type_name(id.kind),
                    id.name,
                    id.resource_group
                ),
            ));
        };
        if world.busy(&key) || set.state == "Deleting" {
            return Err((
                409,
                "OperationNotAllowed",
                format!(
                    "Scale set {} is in the middle of another operation; try again once it \
                     has ended.",
                    id.name
                ),
            ));
        }
        let mut named: Vec<String> = Vec::new();
        for name in body["instanceIds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !named.iter().any(|n| n.eq_ignore_ascii_case(name)) {
                named.push(name.to_string());
            }
        }
        if named.is_empty() {
            return Err((400, "InvalidParameter", "instanceIds names no VM.".into()));
        }
        let members: Vec<(String, String, String)> = world
            .instances(&set.id)
            .into_iter()
            .map(|vm| {
                let name = vm.id.rsplit('/').next().unwrap_or_default().to_string();
                (name, vm.id.to_lowercase(), vm.state.clone())
            })
            .collect();
        let member = |name: &str| {
            members
                .iter()
                .find(|(n, _, _)| n.eq_ignore_ascii_case(name))
        };
        let strangers: Vec<&str> = named
            .iter()
            .map(String::as_str)
            .filter(|n| member(n).is_none())
            .collect();
        if !strangers.is_empty() {
            return Err((
                400,
                "InvalidParameter",
                format!(
                    "The instance IDs {} are not VMs of scale set {}.",
                    strangers.join(", "),
                    id.name
                ),
            ));
        }
        let mut doomed = Vec::new();
        for name in &named {
            let Some((_, vm, state)) = member(name) else {
                continue;
            };
            if state == "Deleting" {
                return Err((
                    409,
                    "OperationNotAllowed",
                    format!("VM {name} is already being deleted."),
                ));
            }
            doomed.push((vm.clone(), Change::Remove));
        }
        for (vm, _) in &doomed {
            if let Some(vm) = world.resources.get_mut(vm) {
                vm.state = "Deleting".into();
            }
        }
        world.lower_capacity(&key, doomed.len() as u64);
        if let Some(set) = world.resources.get_mut(&key) {
            set.state = "Updating".into();
        }
        Ok(self.start_operation(world, id, Verb::Post, doomed))
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

    /// Starts an operation on `id` (and `members` with it); returns its polling headers.
    fn start_operation(
        &self,
        world: &mut World,
        id: &ResourceId,
        verb: Verb,
        members: Vec<(String, Change)>,
    ) -> Vec<(&'static str, String)> {
        let n = self.operations.fetch_add(1, Ordering::Relaxed) + 1;
        let op = format!(
            "{n:08x}-0000-4000-8000-{:012x}",
            fastrand_u64() & 0xffff_ffff_ffff
        );
        let method = verb.method();
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
                verb,
                members,
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

    /// A `Location` URL: `202` while under way; the resource (a PUT's) or `204` once done; the
    /// error's status when failed.
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
            (true, Outcome::Succeed, Some((kind, body))) if op.verb == Verb::Put => {
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
        if id.kind == ResourceType::VirtualMachineScaleSet {
            check_scale_set(&body)?;
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
        if id.kind == ResourceType::VirtualMachineScaleSet && world.busy(&key) {
            return Err((
                409,
                "OperationNotAllowed",
                format!(
                    "Scale set {} is in the middle of another operation; try again once it has \
                     ended.",
                    id.name
                ),
            ));
        }
        let existing = world.resources.get(&key).cloned();
        if existing.as_ref().is_some_and(|e| e.state == "Deleting") {
            return Err((
                409,
                "AnotherOperationInProgress",
                format!("Resource {id} is being deleted."),
            ));
        }
        // What VMs boot with is kept aside: `customData` is never answered, `userData` only when
        // asked for. Left out of an update, each stays as it was.
        let (custom_data_sent, user_data) = match boot_profile(id.kind, &mut body) {
            Some(profile) => (
                profile
                    .get_mut("osProfile")
                    .and_then(Value::as_object_mut)
                    .and_then(|os| os.remove("customData")),
                profile.as_object_mut().and_then(|p| p.remove("userData")),
            ),
            None => (None, None),
        };
        let custom_data_sent = custom_data_sent.and_then(|d| d.as_str().map(str::to_string));
        let user_data = user_data.and_then(|d| d.as_str().map(str::to_string));
        let custom_data = custom_data_sent
            .as_ref()
            .map(|data| format!("{:x}", fnv(data.as_bytes())));
        if id.kind == ResourceType::VirtualMachine {
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
        }
        let address = match (&existing, id.kind) {
            (Some(e), _) => e.address.clone(),
            (None, ResourceType::NetworkInterface) => Some(world.assign_address(false)),
            (None, ResourceType::PublicIpAddress) => Some(world.assign_address(true)),
            _ => None,
        };
        let made = matches!(
            id.kind,
            ResourceType::VirtualMachine | ResourceType::VirtualMachineScaleSet
        );
        let vm_id = existing
            .as_ref()
            .and_then(|e| e.vm_id.clone())
            .or_else(|| made.then(new_uuid));
        let time_created = existing
            .as_ref()
            .and_then(|e| e.created.clone())
            .or_else(|| made.then(now));
        let serial = match &existing {
            Some(e) => e.serial,
            None => world.next_serial(),
        };
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
                user_data: user_data
                    .or_else(|| existing.as_ref().and_then(|e| e.user_data.clone())),
                address,
                vm_id,
                created: time_created,
                serial,
                listed_after: existing.as_ref().and_then(|e| e.listed_after),
            },
        );
        let members = if id.kind == ResourceType::VirtualMachineScaleSet {
            world.resize(&key)
        } else {
            Vec::new()
        };
        let headers = if synchronous {
            Vec::new()
        } else {
            self.start_operation(world, id, Verb::Put, members)
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
        let mut members = Vec::new();
        match id.kind {
            // A VM of a Flexible scale set deleted on its own is one fewer in the set.
            ResourceType::VirtualMachine if stored.state != "Deleting" => {
                if let Some(set) = world.scale_set_of(&stored) {
                    world.lower_capacity(&set, 1);
                }
            }
            ResourceType::VirtualMachineScaleSet => {
                for vm in world
                    .instances(&full)
                    .into_iter()
                    .map(|vm| vm.id.to_lowercase())
                    .collect::<Vec<_>>()
                {
                    if let Some(vm) = world.resources.get_mut(&vm) {
                        vm.state = "Deleting".into();
                    }
                    members.push((vm, Change::Remove));
                }
            }
            _ => {}
        }
        Ok(Some(self.start_operation(world, id, Verb::Delete, members)))
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

/// Where a kind keeps what its VMs boot with (`osProfile.customData` and `userData`): a VM's
/// properties, a scale set's model.
fn boot_profile(kind: ResourceType, body: &mut Value) -> Option<&mut Value> {
    let properties = body.get_mut("properties")?;
    match kind {
        ResourceType::VirtualMachine => Some(properties),
        ResourceType::VirtualMachineScaleSet => properties.get_mut("virtualMachineProfile"),
        _ => None,
    }
}

/// The scale set ID a VM listing's `$filter` selects (`'virtualMachineScaleSet/id' eq
/// '<ID>'`, the property's quotes optional); `None` for any other filter.
fn scale_set_filter(kind: ResourceType, filter: &str) -> Option<String> {
    if kind != ResourceType::VirtualMachine {
        return None;
    }
    let (property, value) = filter.trim().split_once(" eq ")?;
    if !property
        .trim()
        .trim_matches('\'')
        .eq_ignore_ascii_case("virtualMachineScaleSet/id")
    {
        return None;
    }
    let id = value.trim().trim_matches('\'');
    ResourceId::parse(id)
        .ok()
        .filter(|id| id.kind == ResourceType::VirtualMachineScaleSet)
        .map(|_| id.to_string())
}

/// Query parameter `name` of `query`, decoded.
fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        percent_decode(key)
            .eq_ignore_ascii_case(name)
            .then(|| percent_decode(value))
    })
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
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

/// `len` lower-case base-36 digits of `n`.
fn base36(mut n: u64, len: usize) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    (0..len)
        .map(|_| {
            let digit = DIGITS[(n % 36) as usize];
            n /= 36;
            char::from(digit)
        })
        .collect()
}

/// A random version-4 UUID.
fn new_uuid() -> String {
    let (a, b) = (fastrand_u64(), fastrand_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

/// Now, as ARM writes times.
fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// A scale set's etag: it changes whenever what was written of it does (its model, its
/// capacity, lowered by a removal too).
fn etag_of(stored: &Stored) -> String {
    format!("\"{:016x}\"", fnv(stored.body.to_string().as_bytes()))
}

fn fastrand_u64() -> u64 {
    static SEED: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let n = SEED.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    fnv(&n.to_le_bytes()) ^ u64::from(std::process::id())
}
