//! A fault-injecting proxy in front of moto, for what moto cannot show: an EC2 that honours
//! `ClientToken` (a replayed `RunInstances` answers with the first instance, as AWS does), a
//! launch whose answer is lost after the instance was made, lookups that do not show new
//! instances yet (eventual consistency), and throttled answers. Everything else is forwarded to
//! moto unchanged.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

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
    /// `RunInstances` requests moto saw.
    pub launches_forwarded: usize,
    /// The action of every request the proxy received (`DescribeVpcs`, `AssumeRole` …), in
    /// order, whether or not it reached moto: the request log.
    pub received: Vec<String>,
    tokens: HashMap<String, Bytes>,
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
            return Ok(xml(
                StatusCode::SERVICE_UNAVAILABLE,
                "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request \
                 limit exceeded.</Message></Error></Errors><RequestID>proxy</RequestID></Response>"
                    .into(),
            ));
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
    }
    let (status, headers, answer) = match forward(&target, parts, body).await {
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
