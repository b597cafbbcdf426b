//! One connection's tasks: accepting and dialling (with the TLS handshake and the
//! redial backoff), then the reader that decodes and routes frames and the writer that
//! drains the connection's queues, both counting bytes per module and per peer.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use futures_util::StreamExt;
use tokio::{
    io::{AsyncWriteExt, BufWriter},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_rustls::TlsStream;
use tokio_util::{
    codec::{Decoder, FramedRead},
    sync::CancellationToken,
};

use super::{
    Shared, StaticPeer,
    handshakes::Handshakes,
    lane::{Budget, Queued},
    short_id,
};
use crate::{
    frame::{Frame, FrameCodec, FrameError, HEADER_LEN, KEEPALIVE, ProtocolId, keepalive_frame},
    score::NodeId,
    tls::TlsError,
};

/// Modules below this are counted under their own number; any other under `other`. The
/// module of a received frame is whatever the peer wrote, and a label per value would let
/// a peer grow the metrics registry without bound.
const COUNTED_MODULES: u16 = 0x20;

/// Counts a frame's bytes: `wire` as sent, `raw` with the payload uncompressed; per module
/// and per peer (peers are allow-listed, so their labels are bounded).
fn count_bytes(direction: &'static str, module: u16, peer: &NodeId, wire: usize, raw: usize) {
    let module = if module < COUNTED_MODULES {
        module.to_string()
    } else {
        "other".to_owned()
    };
    metrics::counter!("stave_net_bytes_total", "direction" => direction, "kind" => "wire", "module" => module.clone())
        .increment(wire as u64);
    metrics::counter!("stave_net_bytes_total", "direction" => direction, "kind" => "raw", "module" => module)
        .increment(raw as u64);
    metrics::counter!("stave_net_peer_bytes_total", "direction" => direction, "peer" => short_id(peer))
        .increment(wire as u64);
}

/// The frame codec, counting what each decoded frame cost on the wire and noting when
/// bytes last arrived (the reader calls it after every read).
struct CountingCodec {
    codec: FrameCodec,
    peer: NodeId,
    last_read: Instant,
}

impl Decoder for CountingCodec {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, src: &mut bytes::BytesMut) -> Result<Option<Frame>, FrameError> {
        self.last_read = Instant::now();
        let before = src.len();
        let frame = self.codec.decode(src)?;
        if let Some(frame) = &frame {
            let wire = before - src.len();
            let raw = HEADER_LEN + frame.payload.len();
            count_bytes("in", frame.protocol_id.module(), &self.peer, wire, raw);
        }
        Ok(frame)
    }
}

pub(super) async fn read_loop(
    shared: Arc<Shared>,
    reader: tokio::io::ReadHalf<TlsStream<TcpStream>>,
    peer: NodeId,
    connection: u64,
    closed: CancellationToken,
) {
    let codec = CountingCodec {
        codec: FrameCodec::new(shared.config.frame),
        peer,
        last_read: Instant::now(),
    };
    let silence = shared.config.keepalive_timeout;
    let budget = Budget::new(shared.config.recv_queue_bytes);
    let mut frames = FramedRead::new(reader, codec);
    loop {
        // Any bytes count as life, not only whole frames: a large frame on a slow link
        // takes a while to arrive in full.
        let deadline = frames.decoder().last_read + silence;
        let next = tokio::select! {
            () = closed.cancelled() => break,
            next = frames.next() => next,
            () = tokio::time::sleep_until(deadline.into()) => {
                if frames.decoder().last_read.elapsed() < silence {
                    continue;
                }
                metrics::counter!("stave_net_dead_links_total").increment(1);
                tracing::info!(peer = %short_id(&peer), ?silence, "closing connection: nothing received");
                break;
            }
        };
        match next {
            Some(Ok(frame)) if frame.protocol_id == KEEPALIVE => {}
            Some(Ok(frame)) => shared.route(peer, frame, &budget),
            Some(Err(error)) => {
                match error.offence() {
                    Some(offence) => {
                        tracing::warn!(peer = %short_id(&peer), %error, "closing connection: bad frame");
                        shared.penalize(peer, offence);
                    }
                    // The link failed (the peer stopped or crashed, or the network dropped):
                    // nothing the peer is to blame for, and it is redialled.
                    None => tracing::info!(peer = %short_id(&peer), %error, "connection lost"),
                }
                break;
            }
            None => break,
        }
    }
    closed.cancel();
    shared.forget(peer, connection);
}

/// Bytes of small frames coalesced into one write; see [`write_loop`].
const WRITE_BUFFER: usize = 64 << 10;

/// Writes what is queued for `peer`: the frames of the first queue first, those of the
/// second (bulk) only when the first is empty; and a keepalive frame whenever nothing was
/// written for `keepalive`.
pub(super) async fn write_loop(
    writer: tokio::io::WriteHalf<TlsStream<TcpStream>>,
    (mut queue, mut bulk): (mpsc::Receiver<Queued>, mpsc::Receiver<Queued>),
    peer: NodeId,
    keepalive: Duration,
    closed: CancellationToken,
) {
    // Small frames (votes, requests) are coalesced; a frame at least this large goes to
    // the TLS stream without first being copied into the buffer.
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER, writer);
    let ping = keepalive_frame();
    let result: std::io::Result<()> = async {
        loop {
            let first = tokio::select! {
                biased;
                () = closed.cancelled() => return Ok(()),
                first = queue.recv() => first.map(|queued| queued.bytes),
                first = bulk.recv() => first.map(|queued| queued.bytes),
                () = tokio::time::sleep(keepalive) => Some(ping.clone()),
            };
            let Some(first) = first else { return Ok(()) };
            write_counted(&mut writer, &first, &peer).await?;
            // Coalesce what is already queued into one flush, looking at the first queue
            // again before each bulk frame. A frame's byte budget is freed once written.
            while let Ok(more) = queue.try_recv().or_else(|_| bulk.try_recv()) {
                write_counted(&mut writer, &more.bytes, &peer).await?;
            }
            writer.flush().await?;
        }
    }
    .await;
    if let Err(error) = result {
        tracing::debug!(peer = %short_id(&peer), %error, "write failed");
    }
    closed.cancel();
    let _ = writer.shutdown().await;
}

async fn write_counted(
    writer: &mut BufWriter<tokio::io::WriteHalf<TlsStream<TcpStream>>>,
    encoded: &Bytes,
    peer: &NodeId,
) -> std::io::Result<()> {
    writer.write_all(encoded).await?;
    count_encoded("out", encoded, peer);
    Ok(())
}

/// Counts an encoded frame: its raw size comes from the Snappy length of a compressed
/// payload.
fn count_encoded(direction: &'static str, encoded: &[u8], peer: &NodeId) {
    let module = ProtocolId(i32::from_be_bytes([
        encoded[6], encoded[7], encoded[8], encoded[9],
    ]))
    .module();
    let compressed = u16::from_be_bytes([encoded[4], encoded[5]]) & crate::frame::COMPRESSED != 0;
    let payload = &encoded[HEADER_LEN..];
    let raw = if compressed {
        snap::raw::decompress_len(payload).unwrap_or(payload.len())
    } else {
        payload.len()
    };
    count_bytes(direction, module, peer, encoded.len(), HEADER_LEN + raw);
}

/// First wait after `accept` fails; doubles while it keeps failing.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// Longest wait after `accept` fails.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Accepts connections and runs their TLS handshakes, each holding one of the pending
/// handshake slots (see [`Handshakes`]) until it ends or times out.
pub(super) async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let handshakes = Handshakes::new(
        shared.config.max_pending_handshakes,
        shared.config.max_pending_handshakes_per_ip,
    );
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let accepted = tokio::select! {
            () = shared.shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (socket, address) = match accepted {
            Ok(accepted) => {
                backoff = ACCEPT_BACKOFF_MIN;
                accepted
            }
            // Out of descriptors (EMFILE, ENFILE) or buffers, `accept` fails again at once
            // until some are freed: wait instead of spinning a worker on it. The pending
            // connection stays in the kernel's backlog meanwhile.
            Err(error) => {
                metrics::counter!("stave_net_accept_errors_total").increment(1);
                tracing::warn!(%error, ?backoff, "accept failed; waiting");
                tokio::select! {
                    () = shared.shutdown.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        let slot = match handshakes.take(address.ip()) {
            Ok(slot) => slot,
            Err(full) => {
                metrics::counter!("stave_net_refused_total", "reason" => full.label()).increment(1);
                tracing::debug!(%address, reason = full.label(), "connection closed: no handshake slot");
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let handshake =
                tokio::time::timeout(shared.config.handshake_timeout, shared.tls.accept(socket))
                    .await;
            match handshake {
                Ok(Ok((stream, peer))) => {
                    shared.admit(stream, peer, peer);
                }
                Ok(Err(error)) => refused(&address, &error),
                Err(_) => tracing::debug!(%address, "handshake timed out"),
            }
        });
    }
}

fn refused(address: &SocketAddr, error: &TlsError) {
    metrics::counter!("stave_net_refused_total", "reason" => "tls").increment(1);
    tracing::debug!(%address, %error, "peer refused");
}

/// Keeps `peer` connected: dials it, waits while connected (by either side's dial), and
/// redials after a disconnect, backing off exponentially while dials fail.
pub(super) async fn dial_loop(shared: Arc<Shared>, peer: StaticPeer) {
    let mut backoff = shared.config.backoff_min;
    let mut known: Option<NodeId> = None;
    loop {
        if shared.shutdown.is_cancelled() {
            return;
        }
        // A link whose connection ended stays in the map until its read loop forgets it.
        // Its token is already cancelled: waiting on it again would return at once and spin
        // this task without ever yielding, starving the worker the read loop needs (seen:
        // every network of a test runtime stalled). Such a link counts as gone.
        let current = known
            .and_then(|id| shared.links.lock().get(&id).map(|l| l.closed.clone()))
            .filter(|closed| !closed.is_cancelled());
        if let Some(closed) = current {
            if lasted(&shared, closed).await {
                backoff = shared.config.backoff_min;
                continue;
            }
        } else {
            match dial(&shared, &peer).await {
                Ok((id, Some(closed))) => {
                    known = Some(id);
                    if lasted(&shared, closed).await {
                        backoff = shared.config.backoff_min;
                        continue;
                    }
                }
                // Connected, but the peer's own connection to us won the tie-break (or it
                // is banned): wait on that one, or back off.
                Ok((id, None)) => known = Some(id),
                Err(error) => refused(&peer.address, &error),
            }
        }
        tokio::select! {
            () = shared.shutdown.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(shared.config.backoff_max);
    }
}

/// Waits until the link `closed` belongs to ends; true if it lasted longer than the
/// longest backoff. A peer that drops a link at once (it banned this node, or refuses it
/// for a reason the handshake did not show) is so redialled with backoff, not in a loop
/// that spins as fast as handshakes complete.
async fn lasted(shared: &Shared, closed: CancellationToken) -> bool {
    let connected = tokio::time::Instant::now();
    closed.cancelled().await;
    connected.elapsed() >= shared.config.backoff_max
}

async fn dial(
    shared: &Arc<Shared>,
    peer: &StaticPeer,
) -> Result<(NodeId, Option<CancellationToken>), TlsError> {
    let limit = shared.config.handshake_timeout;
    let timed_out = || TlsError::Io(std::io::Error::from(std::io::ErrorKind::TimedOut));
    let socket = tokio::time::timeout(limit, TcpStream::connect(peer.address))
        .await
        .map_err(|_| timed_out())??;
    let _ = socket.set_nodelay(true);
    let (stream, id) = tokio::time::timeout(limit, shared.tls.connect(&peer.name, socket))
        .await
        .map_err(|_| timed_out())??;
    let local = shared.local;
    Ok((id, shared.admit(stream, id, local)))
}
