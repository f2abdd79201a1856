//! Simulated kubelets' HTTPS endpoint, as far as a workload API server needs it to reach a
//! node's pods: `POST /portForward/<namespace>/<pod>`, upgraded to SPDY/3.1 with the
//! `portforward.k8s.io` protocol — what the API server proxies `pods/portforward` to (directly for
//! SPDY clients, and after unwrapping it for clients tunnelling SPDY over WebSockets, such as
//! upstream's KubeadmControlPlane on its way to each control-plane node's etcd).
//!
//! Each [`Kubelet`] listens on its node's own address (the simulated cloud hands out loopback
//! addresses for this, [`crate::cloud::CloudConfig::loopback_addresses`]) with a self-signed
//! certificate (the API server does not check a kubelet's certificate unless told a CA), and
//! forwards each stream pair to where [`PortForwardTargets`] says the pod's port listens. The
//! workload API server reaches it through the node's `InternalIP` and
//! `status.daemonEndpoints.kubeletEndpoint.port`; it must prefer `InternalIP` addresses, as
//! kubeadm configures it (`--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname`).

mod spdy;
mod websocket;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use spdy::{FLAG_FIN, Frame, HeaderReader, HeaderWriter};

/// The port-forward protocol this kubelet speaks.
const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";
/// The longest request head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest data frame written.
const CHUNK: usize = 32 * 1024;

/// Where the pods of a node listen.
pub trait PortForwardTargets: Send + Sync + 'static {
    /// The address the pod `namespace/pod`'s `port` listens on, if that pod runs on `node`.
    fn resolve(&self, node: &str, namespace: &str, pod: &str, port: u16) -> Option<SocketAddr>;
}

/// One node's kubelet endpoint; stops listening (and drops its connections) when dropped.
pub struct Kubelet {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet").field("addr", &self.addr).finish()
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Kubelet {
    /// Listens on `ip` (a free port) for the node `node`. Must be called within a Tokio runtime.
    pub async fn start(
        ip: IpAddr,
        node: &str,
        targets: Arc<dyn PortForwardTargets>,
    ) -> io::Result<Self> {
        let tls = server_config(ip, node)?;
        let listener = TcpListener::bind(SocketAddr::new(ip, 0)).await?;
        let addr = listener.local_addr()?;
        let node = node.to_string();
        let task = tokio::spawn(async move {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls);
            let mut connections = JoinSet::new();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let targets = Arc::clone(&targets);
                let node = node.clone();
                connections.spawn(async move {
                    let Ok(Ok(tls)) =
                        tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(tcp)).await
                    else {
                        return;
                    };
                    if let Err(error) = serve(tls, &node, targets.as_ref()).await {
                        tracing::debug!(%error, node, "simulated kubelet: connection ended");
                    }
                });
                while connections.try_join_next().is_some() {}
            }
        });
        Ok(Self { addr, task })
    }

    /// The port it listens on: the node's `status.daemonEndpoints.kubeletEndpoint.port`.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

fn server_config(ip: IpAddr, node: &str) -> io::Result<Arc<tokio_rustls::rustls::ServerConfig>> {
    use tokio_rustls::rustls;
    let other = |e: &dyn std::fmt::Display| io::Error::other(format!("kubelet certificate: {e}"));
    let certified = rcgen::generate_simple_self_signed(vec![ip.to_string(), node.to_string()])
        .map_err(|e| other(&e))?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| other(&e))?
    .with_no_client_auth()
    .with_single_cert(vec![certified.cert.der().clone()], key)
    .map_err(|e| other(&e))?;
    Ok(Arc::new(config))
}

/// A request head: method, path and lower-cased headers.
struct Head {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
    }
}

/// Reads the request head; returns it with whatever bytes followed it.
async fn read_head<S: AsyncRead + Unpin>(io: &mut S) -> io::Result<(Head, Vec<u8>)> {
    let mut buffer = Vec::with_capacity(1024);
    let end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buffer.len() > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request head too long",
            ));
        }
        let mut chunk = [0u8; 1024];
        let read = io.read(&mut chunk).await?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let rest = buffer.split_off(end + 4);
    let text = String::from_utf8_lossy(&buffer[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let mut request = lines.next().unwrap_or_default().split(' ');
    let method = request.next().unwrap_or_default().to_string();
    let path = request.next().unwrap_or_default().to_string();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((
        Head {
            method,
            path,
            headers,
        },
        rest,
    ))
}

async fn respond<S: AsyncWrite + Unpin>(io: &mut S, status: &str, body: &str) -> io::Result<()> {
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    io.write_all(response.as_bytes()).await?;
    io.shutdown().await
}

/// Serves one connection: a port-forward upgrade, or an error response.
async fn serve<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut io: S,
    node: &str,
    targets: &dyn PortForwardTargets,
) -> io::Result<()> {
    let (head, rest) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut io))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
    let path = head.path.split('?').next().unwrap_or_default();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (namespace, pod) = match segments.as_slice() {
        ["portForward", namespace, pod] | ["portForward", namespace, pod, _] => {
            (namespace.to_string(), pod.to_string())
        }
        _ => return respond(&mut io, "404 Not Found", "not found").await,
    };
    if head.method != "POST" && head.method != "GET" {
        return respond(&mut io, "405 Method Not Allowed", "method not allowed").await;
    }
    if websocket::requested(&head) {
        return websocket::serve(io, rest, &head, node, &namespace, &pod, targets).await;
    }
    if !head
        .values("upgrade")
        .any(|v| v.eq_ignore_ascii_case("SPDY/3.1"))
    {
        return respond(
            &mut io,
            "400 Bad Request",
            "this simulated kubelet forwards ports over SPDY/3.1 or WebSocket only",
        )
        .await;
    }
    if !head
        .values("x-stream-protocol-version")
        .any(|v| v == PORT_FORWARD_PROTOCOL)
    {
        return respond(
            &mut io,
            "403 Forbidden",
            "unable to upgrade: no common stream protocol (portforward.k8s.io)",
        )
        .await;
    }
    io.write_all(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {PORT_FORWARD_PROTOCOL}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await?;
    let io = Prefixed {
        prefix: rest,
        offset: 0,
        inner: io,
    };
    session(io, node, &namespace, &pod, targets).await
}

/// A connection whose first bytes were already read (they followed the request head).
struct Prefixed<S> {
    prefix: Vec<u8>,
    offset: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(left) = this.prefix.get(this.offset..).filter(|l| !l.is_empty()) {
            let n = left.len().min(buf.remaining());
            buf.put_slice(&left[..n]);
            this.offset += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What the session writes, in order.
enum Out {
    Reply(u32),
    Data(u32, Vec<u8>, bool),
    Reset(u32),
    Ping(u32),
}

/// A request's two streams, by `requestid`.
#[derive(Default)]
struct Request {
    error: Option<u32>,
}

async fn session<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: S,
    node: &str,
    namespace: &str,
    pod: &str,
    targets: &dyn PortForwardTargets,
) -> io::Result<()> {
    let (mut reader, mut writer) = tokio::io::split(io);
    let (out, mut outgoing) = mpsc::unbounded_channel::<Out>();
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let mut headers = HeaderWriter::new();
        while let Some(frame) = outgoing.recv().await {
            let bytes = match frame {
                Out::Reply(stream) => spdy::syn_reply(stream, 0, &[], &mut headers),
                Out::Data(stream, data, fin) => {
                    spdy::data(stream, if fin { FLAG_FIN } else { 0 }, &data)
                }
                Out::Reset(stream) => spdy::rst_stream(stream, 5),
                Out::Ping(id) => spdy::ping(id),
            };
            let Ok(bytes) = bytes else { break };
            if writer.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = writer.shutdown().await;
    });
    let mut headers = HeaderReader::new();
    let mut requests: HashMap<String, Request> = HashMap::new();
    let mut inbound: HashMap<u32, mpsc::UnboundedSender<Option<Vec<u8>>>> = HashMap::new();
    while let Some(frame) = spdy::read_frame(&mut reader, &mut headers).await? {
        match frame {
            Frame::SynStream {
                stream, headers, ..
            } => {
                let header = |name: &str| {
                    headers
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, v)| v.as_str())
                };
                let request_id = header("requestid").unwrap_or("0").to_string();
                let _ = out.send(Out::Reply(stream));
                match header("streamtype") {
                    Some("error") => {
                        requests.entry(request_id).or_default().error = Some(stream);
                    }
                    Some("data") => {
                        let error = requests.entry(request_id).or_default().error;
                        let port = header("port").and_then(|p| p.parse::<u16>().ok());
                        let target =
                            port.and_then(|port| targets.resolve(node, namespace, pod, port));
                        let (sender, received) = mpsc::unbounded_channel();
                        inbound.insert(stream, sender);
                        let out = out.clone();
                        let what = format!(
                            "{namespace}/{pod} port {}",
                            header("port").unwrap_or("(none)")
                        );
                        tasks.spawn(forward(target, what, received, move |report| {
                            let sent = match report {
                                Forwarded::Data(data) => out.send(Out::Data(stream, data, false)),
                                Forwarded::Failed(message) => {
                                    if let Some(error) = error {
                                        let _ =
                                            out.send(Out::Data(error, message.into_bytes(), true));
                                    }
                                    out.send(Out::Data(stream, Vec::new(), true))
                                }
                                Forwarded::TargetClosed => {
                                    out.send(Out::Data(stream, Vec::new(), true))
                                }
                                Forwarded::Finished => match error {
                                    Some(error) => out.send(Out::Data(error, Vec::new(), true)),
                                    None => Ok(()),
                                },
                            };
                            sent.is_ok()
                        }));
                    }
                    _ => {
                        let _ = out.send(Out::Reset(stream));
                    }
                }
            }
            Frame::Data {
                stream,
                flags,
                data,
            } => {
                if let Some(sender) = inbound.get(&stream) {
                    if !data.is_empty() {
                        let _ = sender.send(Some(data));
                    }
                    if flags & FLAG_FIN != 0 {
                        let _ = sender.send(None);
                        inbound.remove(&stream);
                    }
                }
            }
            Frame::RstStream { stream, .. } => {
                inbound.remove(&stream);
            }
            Frame::Ping(id) if id % 2 == 1 => {
                let _ = out.send(Out::Ping(id));
            }
            Frame::GoAway => break,
            _ => {}
        }
    }
    drop(inbound);
    tasks.abort_all();
    Ok(())
}

/// What a forwarded port reports to its connection, in order: data, then either a failure or
/// the target closing, then the end.
pub(crate) enum Forwarded {
    /// Bytes the target sent.
    Data(Vec<u8>),
    /// The target could not be reached; the port is unusable.
    Failed(String),
    /// The target closed its side.
    TargetClosed,
    /// Both directions are done.
    Finished,
}

/// Forwards one port's data to `target`: what the client sends (`received`; `None` when it
/// closes its side) goes to the target, what the target answers is `report`ed; failures are
/// reported for the port's error channel, as a kubelet does. `report` answers `false` when the
/// connection is gone.
pub(crate) async fn forward(
    target: Option<SocketAddr>,
    what: String,
    mut received: mpsc::UnboundedReceiver<Option<Vec<u8>>>,
    report: impl Fn(Forwarded) -> bool + Send,
) {
    let Some(target) = target else {
        report(Forwarded::Failed(format!(
            "no pod port {what} on this node"
        )));
        return;
    };
    let tcp = match TcpStream::connect(target).await {
        Ok(tcp) => tcp,
        Err(e) => {
            report(Forwarded::Failed(format!("error forwarding {what}: {e}")));
            return;
        }
    };
    let (mut from_target, mut to_target) = tcp.into_split();
    let upstream = async move {
        while let Some(Some(chunk)) = received.recv().await {
            if to_target.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to_target.shutdown().await;
    };
    let downstream = async {
        let mut buffer = vec![0u8; CHUNK];
        loop {
            match from_target.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if !report(Forwarded::Data(buffer[..n].to_vec())) {
                        return;
                    }
                }
            }
        }
        report(Forwarded::TargetClosed);
    };
    tokio::join!(upstream, downstream);
    report(Forwarded::Finished);
}
