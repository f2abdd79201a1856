//! A fault-injecting proxy in front of moto, for what moto cannot show: an EC2 that honours
//! `ClientToken` (a replayed `RunInstances` answers with the first instance, as AWS does), an
//! Auto Scaling that refuses a second group of a name (moto replaces the first), a launch whose
//! answer is lost after the instance was made, lookups that do not show new instances yet
//! (eventual consistency), and throttled answers — each on demand, or at random for a chaos run
//! ([`Chaos`]: seeded throttling of any call, lost answers of the Auto Scaling and launch template
//! writes, lists lagging behind new groups and instances). Everything else is forwarded to moto
//! unchanged.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// What the proxy does to the next requests.
#[derive(Debug, Default)]
pub struct Faults {
    /// Answer `RunInstances` replays of a seen `ClientToken` with the first answer.
    pub honour_client_tokens: bool,
    /// The next `RunInstances` reaches moto, and its answer is replaced by an empty 500.
    pub lose_next_launch_answer: bool,
    /// The next this many `DescribeInstances` answer with no instance.
    pub hidden_describes: usize,
    /// The next this many requests are answered `RequestLimitExceeded` without reaching moto.
    pub throttled: usize,
    /// Every request is answered with this error code and message, as AWS answers a request
    /// signed with refused credentials.
    pub refuse_all: Option<(String, String)>,
    /// Answer `CreateAutoScalingGroup` of a name moto holds a group of with `AlreadyExists`
    /// without reaching moto, as AWS does (moto replaces the group).
    pub honour_group_names: bool,
    /// `CreateAutoScalingGroup` requests refused so.
    pub group_names_refused: usize,
    /// Random faults, while set.
    pub chaos: Option<Chaos>,
    /// `RunInstances` requests moto saw.
    pub launches_forwarded: usize,
    /// The action of every request the proxy received (`DescribeVpcs`, `AssumeRole` …), in
    /// order, whether or not it reached moto: the request log.
    pub received: Vec<String>,
    tokens: HashMap<String, Bytes>,
    /// The groups moto holds, by name, as the proxy saw them made and deleted.
    groups: BTreeSet<String>,
}

/// The writes whose answers a [`Chaos`] loses: every Auto Scaling write and every launch
/// template write the pool actuator makes.
pub const LOSABLE: [&str; 10] = [
    "CreateAutoScalingGroup",
    "UpdateAutoScalingGroup",
    "DeleteAutoScalingGroup",
    "TerminateInstanceInAutoScalingGroup",
    "SuspendProcesses",
    "CreateOrUpdateTags",
    "CreateLaunchTemplate",
    "CreateLaunchTemplateVersion",
    "ModifyLaunchTemplate",
    "DeleteLaunchTemplate",
];

/// Random faults drawn from a seeded generator (requests come concurrently: a seed fixes the
/// sequence of draws, not which request gets which): any request throttled, answers of the
/// [`LOSABLE`] writes lost after moto made the change (the first `CreateAutoScalingGroup`'s
/// always), and a new group (instance) left out of
/// `DescribeAutoScalingGroups` (`DescribeInstances`) answers — always from the first answer
/// that would name it, and from every answer until a lag of its own drawn up to [`Chaos::lag`]
/// has passed since the proxy first saw it. A `DescribeInstances` naming a hidden instance is
/// refused with `InvalidInstanceID.NotFound`, as EC2 refuses one it does not know yet.
#[derive(Debug)]
pub struct Chaos {
    /// The probability that a request is answered with its service's throttling error without
    /// reaching moto.
    pub throttle_rate: f64,
    /// The probability that a [`LOSABLE`] write moto carried out is answered with an empty 500.
    pub lose_rate: f64,
    /// The longest a new group or instance stays out of lists (each draws its own lag).
    pub lag: Duration,
    /// What was injected so far.
    pub injected: Injected,
    rng: fastrand::Rng,
    /// When each group (by name) and instance (by ID) the proxy saw shows in lists.
    shows_at: HashMap<String, Showing>,
}

/// When a new group or instance shows in lists.
#[derive(Debug)]
struct Showing {
    /// Not before this.
    at: Instant,
    /// Not before one answer left it out, however short its lag: every new name is hidden at
    /// least once, so a run cannot pass without the fault it claims to inject.
    left_out: bool,
}

/// The faults a [`Chaos`] injected, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Injected {
    /// Requests answered with a throttling error.
    pub throttled: usize,
    /// Writes carried out whose answer was replaced by a 500.
    pub lost_answers: usize,
    /// Of those, `CreateAutoScalingGroup`s (the first is always lost).
    pub lost_creates: usize,
    /// Groups left out of `DescribeAutoScalingGroups` answers.
    pub hidden_groups: usize,
    /// Instances left out of `DescribeInstances` answers, or refused as not found.
    pub hidden_instances: usize,
}

impl Chaos {
    /// Faults at these rates, drawn from `seed`.
    pub fn new(seed: u64, throttle_rate: f64, lose_rate: f64, lag: Duration) -> Self {
        Self {
            throttle_rate,
            lose_rate,
            lag,
            injected: Injected::default(),
            rng: fastrand::Rng::with_seed(seed),
            shows_at: HashMap::new(),
        }
    }

    fn draw(&mut self, rate: f64) -> bool {
        self.rng.f64() < rate
    }

    /// Marks `name` (a group's name, an instance's ID) new unless seen before: it shows in lists
    /// after a lag of its own.
    fn saw(&mut self, name: &str) {
        if !self.shows_at.contains_key(name) {
            let lag = self.lag.mul_f64(self.rng.f64());
            self.shows_at.insert(
                name.to_string(),
                Showing {
                    at: Instant::now() + lag,
                    left_out: false,
                },
            );
        }
    }

    /// Whether the answer being written leaves `name` out (recorded: the first answer always
    /// does).
    fn hidden(&mut self, name: &str) -> bool {
        match self.shows_at.get_mut(name) {
            Some(showing) if !showing.left_out || Instant::now() < showing.at => {
                showing.left_out = true;
                true
            }
            _ => false,
        }
    }
}

/// The proxy: its URL and its faults.
pub struct FaultProxy {
    pub url: String,
    pub faults: Arc<Mutex<Faults>>,
}

fn form_value(body: &[u8], key: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.replace("%2D", "-").replace("%2d", "-"))
    })
}

fn xml(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert("content-type", "text/xml".parse().unwrap());
    response
}

async fn forward(
    target: &str,
    parts: hyper::http::request::Parts,
    body: Bytes,
) -> Result<(StatusCode, hyper::HeaderMap, Bytes), String> {
    let authority = target.trim_start_matches("http://").to_string();
    let stream = tokio::net::TcpStream::connect(&authority)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let mut request = Request::builder().method(parts.method).uri(
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    );
    for (name, value) in &parts.headers {
        request = request.header(name, value);
    }
    let request = request.body(Full::new(body)).map_err(|e| e.to_string())?;
    let answer = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let (parts, body) = answer.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok((parts.status, parts.headers, body))
}

/// The values of the form fields named `<prefix>1`, `<prefix>2` … (`InstanceId.`).
fn form_list(body: &[u8], prefix: &str) -> Vec<String> {
    let Ok(text) = std::str::from_utf8(body) else {
        return Vec::new();
    };
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, _)| {
            k.strip_prefix(prefix)
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(|(_, v)| v.replace("%2D", "-").replace("%2d", "-"))
        .collect()
}

/// The service a request is signed for (`ec2`, `autoscaling`, `secretsmanager` …): the fourth
/// part of the credential scope of its `Authorization` header.
fn service_of(headers: &hyper::HeaderMap) -> String {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("Credential=").nth(1))
        .and_then(|scope| scope.split('/').nth(3))
        .unwrap_or_default()
        .to_string()
}

/// The answer of a throttled request, in its service's protocol.
fn throttled(service: &str) -> Response<Full<Bytes>> {
    match service {
        "ec2" => xml(
            StatusCode::SERVICE_UNAVAILABLE,
            "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit \
             exceeded.</Message></Error></Errors><RequestID>proxy</RequestID></Response>"
                .into(),
        ),
        "secretsmanager" => {
            let mut response = Response::new(Full::new(Bytes::from_static(
                br#"{"__type":"ThrottlingException","message":"Rate exceeded"}"#,
            )));
            *response.status_mut() = StatusCode::BAD_REQUEST;
            response.headers_mut().insert(
                "content-type",
                "application/x-amz-json-1.1".parse().unwrap(),
            );
            response
        }
        _ => query_error("Throttling", "Rate exceeded"),
    }
}

/// An error answer of a query API (Auto Scaling, ELBv2).
fn query_error(code: &str, message: &str) -> Response<Full<Bytes>> {
    xml(
        StatusCode::BAD_REQUEST,
        format!(
            "<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}\
             </Message></Error><RequestId>proxy</RequestId></ErrorResponse>"
        ),
    )
}

/// The ranges of the `<tag>…</tag>` elements directly in `xml` (those nested in one of them
/// are part of it).
fn elements(xml: &str, tag: &str) -> Vec<Range<usize>> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut found = Vec::new();
    // How deep in `<tag>` elements `at` is, and where the outermost one began.
    let mut depth = 0_usize;
    let mut start = 0;
    let mut at = 0;
    loop {
        let next_open = xml[at..].find(&open).map(|i| i + at);
        let Some(next_close) = xml[at..].find(&close).map(|i| i + at) else {
            return found;
        };
        match next_open {
            Some(o) if o < next_close => {
                if depth == 0 {
                    start = o;
                }
                depth += 1;
                at = o + open.len();
            }
            _ => {
                at = next_close + close.len();
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    found.push(start..at);
                }
            }
        }
    }
}

/// The text of every `<tag>` element in `xml`, at any depth.
fn texts<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    xml.match_indices(&open)
        .filter_map(|(i, _)| {
            let start = i + open.len();
            xml[start..]
                .find(&close)
                .map(|end| &xml[start..start + end])
        })
        .collect()
}

/// `xml` with the `<child>` elements of its first `<container>` rewritten by `keep` (`None`
/// leaves one out).
fn rewrite(
    xml: &str,
    container: &str,
    child: &str,
    mut keep: impl FnMut(&str) -> Option<String>,
) -> String {
    let open = format!("<{container}>");
    let Some(start) = xml.find(&open).map(|i| i + open.len()) else {
        return xml.to_string();
    };
    let Some(end) = xml[start..]
        .find(&format!("</{container}>"))
        .map(|i| i + start)
    else {
        return xml.to_string();
    };
    let inner = &xml[start..end];
    let mut out = String::with_capacity(xml.len());
    out.push_str(&xml[..start]);
    let mut at = 0;
    for range in elements(inner, child) {
        out.push_str(&inner[at..range.start]);
        if let Some(kept) = keep(&inner[range.clone()]) {
            out.push_str(&kept);
        }
        at = range.end;
    }
    out.push_str(&inner[at..]);
    out.push_str(&xml[end..]);
    out
}

impl Chaos {
    /// `answer` (of `DescribeAutoScalingGroups`) without the groups that do not show yet.
    fn groups_shown(&mut self, answer: &str) -> String {
        let mut hidden = 0;
        let shown = rewrite(answer, "AutoScalingGroups", "member", |group| {
            let name = texts(group, "AutoScalingGroupName").first().copied();
            if name.is_some_and(|name| self.hidden(name)) {
                hidden += 1;
                return None;
            }
            Some(group.to_string())
        });
        self.injected.hidden_groups += hidden;
        shown
    }

    /// `answer` (of `DescribeInstances`) without the instances that do not show yet, and
    /// without the reservations left empty.
    fn instances_shown(&mut self, answer: &str) -> String {
        let mut hidden = 0;
        let shown = rewrite(answer, "reservationSet", "item", |reservation| {
            let mut left = 0;
            let kept = rewrite(reservation, "instancesSet", "item", |instance| {
                let id = texts(instance, "instanceId").first().copied();
                if id.is_some_and(|id| self.hidden(id)) {
                    hidden += 1;
                    return None;
                }
                left += 1;
                Some(instance.to_string())
            });
            (left > 0).then_some(kept)
        });
        self.injected.hidden_instances += hidden;
        shown
    }
}

async fn handle(
    target: String,
    faults: Arc<Mutex<Faults>>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = request.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let action = form_value(&body, "Action").unwrap_or_default();
    let token = form_value(&body, "ClientToken");
    let group = form_value(&body, "AutoScalingGroupName");
    {
        let mut faults = faults.lock().unwrap();
        faults.received.push(action.clone());
        if let Some((code, message)) = &faults.refuse_all {
            return Ok(xml(
                StatusCode::FORBIDDEN,
                format!(
                    "<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message>\
                     </Error></Errors><RequestID>proxy</RequestID></Response>"
                ),
            ));
        }
        if faults.throttled > 0 {
            faults.throttled -= 1;
            return Ok(throttled("ec2"));
        }
        if let Some(chaos) = faults.chaos.as_mut()
            && chaos.draw(chaos.throttle_rate)
        {
            chaos.injected.throttled += 1;
            return Ok(throttled(&service_of(&parts.headers)));
        }
        if action == "DescribeInstances" && faults.hidden_describes > 0 {
            faults.hidden_describes -= 1;
            return Ok(xml(
                StatusCode::OK,
                "<DescribeInstancesResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
                 <requestId>proxy</requestId><reservationSet/></DescribeInstancesResponse>"
                    .into(),
            ));
        }
        if action == "RunInstances"
            && faults.honour_client_tokens
            && let Some(first) = token.as_ref().and_then(|t| faults.tokens.get(t))
        {
            return Ok(xml(
                StatusCode::OK,
                String::from_utf8_lossy(first).into_owned(),
            ));
        }
        if action == "CreateAutoScalingGroup"
            && faults.honour_group_names
            && group.as_ref().is_some_and(|g| faults.groups.contains(g))
        {
            faults.group_names_refused += 1;
            return Ok(query_error(
                "AlreadyExists",
                "AutoScalingGroup by this name already exists",
            ));
        }
    }
    let (status, headers, answer) = match forward(&target, parts, body.clone()).await {
        Ok(answer) => answer,
        Err(error) => return Ok(xml(StatusCode::BAD_GATEWAY, error)),
    };
    let mut faults = faults.lock().unwrap();
    if action == "RunInstances" {
        faults.launches_forwarded += 1;
        if status.is_success()
            && let Some(token) = token
        {
            faults.tokens.insert(token, answer.clone());
        }
        if faults.lose_next_launch_answer {
            faults.lose_next_launch_answer = false;
            return Ok(xml(StatusCode::INTERNAL_SERVER_ERROR, String::new()));
        }
    }
    let mut answer = answer;
    if status.is_success()
        && let Some(group) = group
    {
        match action.as_str() {
            "CreateAutoScalingGroup" => {
                if let Some(chaos) = faults.chaos.as_mut() {
                    chaos.saw(&group);
                }
                faults.groups.insert(group);
            }
            "DeleteAutoScalingGroup" => {
                faults.groups.remove(&group);
            }
            _ => {}
        }
    }
    if status.is_success()
        && let Some(chaos) = faults.chaos.as_mut()
    {
        let text = String::from_utf8_lossy(&answer).into_owned();
        for id in texts(&text, "instanceId")
            .into_iter()
            .chain(texts(&text, "InstanceId"))
        {
            chaos.saw(id);
        }
        match action.as_str() {
            "DescribeAutoScalingGroups" => answer = Bytes::from(chaos.groups_shown(&text)),
            "DescribeInstances" => {
                let named = form_list(&body, "InstanceId.");
                if let Some(hidden) = named.iter().find(|id| chaos.hidden(id)) {
                    chaos.injected.hidden_instances += 1;
                    return Ok(xml(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "<Response><Errors><Error><Code>InvalidInstanceID.NotFound</Code>\
                             <Message>The instance ID '{hidden}' does not exist</Message></Error>\
                             </Errors><RequestID>proxy</RequestID></Response>"
                        ),
                    ));
                }
                answer = Bytes::from(chaos.instances_shown(&text));
            }
            _ => {}
        }
        // The first group's creation always loses its answer: the case a second group would
        // come from is in every run, whatever the draws.
        let first_create = action == "CreateAutoScalingGroup" && chaos.injected.lost_creates == 0;
        if LOSABLE.contains(&action.as_str()) && (first_create || chaos.draw(chaos.lose_rate)) {
            if action == "CreateAutoScalingGroup" {
                chaos.injected.lost_creates += 1;
            }
            chaos.injected.lost_answers += 1;
            return Ok(xml(StatusCode::INTERNAL_SERVER_ERROR, String::new()));
        }
    }
    let mut response = Response::new(Full::new(answer));
    *response.status_mut() = status;
    if let Some(kind) = headers.get("content-type") {
        response.headers_mut().insert("content-type", kind.clone());
    }
    Ok(response)
}

impl FaultProxy {
    /// A proxy on a free loopback port in front of moto, with no faults yet.
    pub async fn start() -> Self {
        let target = super::endpoint();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let faults = Arc::new(Mutex::new(Faults::default()));
        let shared = faults.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (target, faults) = (target.clone(), shared.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        handle(target.clone(), faults.clone(), request)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { url, faults }
    }
}
