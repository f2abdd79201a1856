//! The kubelet's WebSocket port-forward, binary protocol `v4.channel.k8s.io`: what the API server
//! passes `pods/portforward` on to, unchanged, for WebSocket clients that do not tunnel SPDY —
//! kube-rs's `Api::portforward`, which this workspace's KubeadmControlPlane uses to reach each
//! control-plane node's etcd.
//!
//! One connection carries the ports named by the `port` query parameters. Port number `i` has
//! data channel `2i` and error channel `2i + 1`; every message is one binary frame whose first
//! byte is its channel. The kubelet opens each channel with the port's number (2 bytes,
//! little-endian), writes a failure to the error channel (the port is unusable after it), and
//! closes the connection once every port's target has closed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::{Forwarded, Head, PortForwardTargets, Prefixed, forward, respond};

/// The subprotocol spoken.
const PROTOCOL: &str = "v4.channel.k8s.io";

/// Whether `head` asks for a WebSocket.
pub(super) fn requested(head: &Head) -> bool {
    head.values("upgrade")
        .any(|v| v.eq_ignore_ascii_case("websocket"))
}

/// The ports of the `port` query parameters of `path`; `None` when one is not a port.
fn ports(path: &str) -> Option<Vec<u16>> {
    let query = path.split_once('?').map(|(_, q)| q).unwrap_or_default();
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(name, _)| *name == "port")
        .map(|(_, value)| value.parse::<u16>().ok().filter(|p| *p != 0))
        .collect()
}

/// Upgrades the connection (whose head was `head`, followed by `rest`) and forwards its ports.
pub(super) async fn serve<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut io: S,
    rest: Vec<u8>,
    head: &Head,
    node: &str,
    namespace: &str,
    pod: &str,
    targets: &dyn PortForwardTargets,
) -> std::io::Result<()> {
    if !head.values("sec-websocket-protocol").any(|p| p == PROTOCOL) {
        return respond(
            &mut io,
            "400 Bad Request",
            "unable to upgrade: no common WebSocket protocol (v4.channel.k8s.io)",
        )
        .await;
    }
    let Some(key) = head.values("sec-websocket-key").next() else {
        return respond(&mut io, "400 Bad Request", "no Sec-WebSocket-Key").await;
    };
    let ports = match ports(&head.path) {
        Some(ports) if !ports.is_empty() && ports.len() <= 64 => ports,
        _ => {
            return respond(
                &mut io,
                "400 Bad Request",
                "query parameter \"port\" is required: one to 64 port numbers",
            )
            .await;
        }
    };
    let accept = derive_accept_key(key.as_bytes());
    io.write_all(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {PROTOCOL}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await?;
    let io = Prefixed {
        prefix: rest,
        offset: 0,
        inner: io,
    };
    let socket = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
    let (mut sink, mut incoming) = socket.split();
    let (out, mut outgoing) = mpsc::unbounded_channel::<Message>();
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        while let Some(message) = outgoing.recv().await {
            let close = matches!(message, Message::Close(_));
            if sink.send(message).await.is_err() || close {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let frame = |channel: usize, bytes: &[u8]| {
        let mut frame = Vec::with_capacity(bytes.len() + 1);
        frame.push(u8::try_from(channel).unwrap_or(u8::MAX));
        frame.extend_from_slice(bytes);
        Message::binary(frame)
    };
    let open = Arc::new(AtomicUsize::new(ports.len()));
    let mut inbound = Vec::with_capacity(ports.len());
    for (index, port) in ports.iter().enumerate() {
        let (data, error) = (2 * index, 2 * index + 1);
        for channel in [data, error] {
            let _ = out.send(frame(channel, &port.to_le_bytes()));
        }
        let (sender, received) = mpsc::unbounded_channel();
        inbound.push(sender);
        let target = targets.resolve(node, namespace, pod, *port);
        let (out, open) = (out.clone(), Arc::clone(&open));
        let what = format!("{namespace}/{pod} port {port}");
        tasks.spawn(forward(target, what, received, move |report| {
            // The connection closes once every port is done (failed, or its target closed).
            let port_done = || {
                if open.fetch_sub(1, Ordering::AcqRel) == 1 {
                    let _ = out.send(Message::Close(None));
                }
            };
            let sent = match report {
                Forwarded::Data(bytes) => out.send(frame(data, &bytes)),
                Forwarded::Failed(message) => {
                    let sent = out.send(frame(error, message.as_bytes()));
                    port_done();
                    sent
                }
                Forwarded::TargetClosed => {
                    port_done();
                    Ok(())
                }
                Forwarded::Finished => Ok(()),
            };
            sent.is_ok()
        }));
    }
    while let Some(Ok(message)) = incoming.next().await {
        match message {
            Message::Binary(bytes) => {
                let Some((&channel, data)) = bytes.split_first() else {
                    continue;
                };
                let channel = usize::from(channel);
                if channel % 2 == 0
                    && !data.is_empty()
                    && let Some(sender) = inbound.get(channel / 2)
                {
                    let _ = sender.send(Some(data.to_vec()));
                }
            }
            Message::Ping(payload) => {
                let _ = out.send(Message::Pong(payload));
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    for sender in &inbound {
        let _ = sender.send(None);
    }
    drop(inbound);
    let _ = out.send(Message::Close(None));
    drop(out);
    // Let the ports finish what the targets still answer, then stop.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ports_are_the_port_query_parameters() {
        assert_eq!(
            ports("/portForward/kube-system/etcd-a?port=2379&port=2380"),
            Some(vec![2379, 2380])
        );
        assert_eq!(ports("/portForward/kube-system/etcd-a"), Some(vec![]));
        assert_eq!(ports("/portForward/ns/p?port=http"), None);
        assert_eq!(ports("/portForward/ns/p?port=0"), None);
    }
}
