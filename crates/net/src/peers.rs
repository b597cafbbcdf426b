//! The peer manager: one TLS connection per peer, frames routed by protocol id, requests
//! matched to responses by seq, static peers redialled with backoff, offenders scored and
//! banned.
//!
//! Every connection runs two tasks. The reader decodes frames and routes them: a response
//! (negative protocol id) to the request waiting on `(peer, seq)`, a request or broadcast to
//! the channel its module registered. The writer drains a bounded queue of frames that were
//! encoded (and compressed) once by whoever sent them, so a broadcast costs one compression
//! however many peers it reaches.
//!
//! Both sides of a pair may dial each other at once. Both then keep the connection dialled
//! by the node with the smaller id and close the other, so they agree without talking.

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{broadcast, mpsc, oneshot},
};
use tokio_rustls::TlsStream;
use tokio_util::sync::CancellationToken;

mod connection;
mod handshakes;
mod lane;

use connection::{accept_loop, dial_loop, read_loop, write_loop};
use lane::{Budget, Lane, Refused};

use crate::{
    frame::{Frame, FrameConfig, FrameError, ProtocolId, VERSION, encode_frame},
    score::{NodeId, Offence, PeerScores, ScoreConfig, Verdict},
    tasks::{Task, Tasks},
    tls::NodeTls,
};

/// A peer to keep connected: the name its certificate carries and where it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticPeer {
    /// The DNS name in its certificate (checked in the handshake).
    pub name: String,
    /// Its listening address.
    pub address: SocketAddr,
}

/// How the peer manager listens, dials and limits.
#[derive(Debug, Clone)]
pub struct NetworkConfig {
    /// Where to accept peers.
    pub listen: SocketAddr,
    /// Peers to dial and keep connected.
    pub peers: Vec<StaticPeer>,
    /// Frame limits and compression.
    pub frame: FrameConfig,
    /// Scoring and bans.
    pub score: ScoreConfig,
    /// How long a request waits for its response.
    pub request_timeout: Duration,
    /// How long a TLS handshake may take.
    pub handshake_timeout: Duration,
    /// Most accepted connections whose TLS handshake has not finished; beyond it, new
    /// connections are closed at once. Bounds what unauthenticated parties can hold.
    pub max_pending_handshakes: usize,
    /// Most of those from one IP address, so one host cannot take every slot.
    pub max_pending_handshakes_per_ip: usize,
    /// First wait before redialling a peer; doubles on every failure.
    pub backoff_min: Duration,
    /// Longest wait before redialling.
    pub backoff_max: Duration,
    /// Frames queued for one peer before sends to it fail (or wait).
    pub send_queue: usize,
    /// Bytes queued for one peer before sends to it fail (or wait): what a peer that
    /// stops reading can hold of this node's memory (a frame larger than this goes alone).
    pub send_queue_bytes: usize,
    /// Bulk frames (transaction gossip, see [`Network::broadcast_bulk`]) queued for one
    /// peer before more are dropped. Gossip is best effort: a peer that stalls (paused,
    /// overloaded) gets the transactions in blocks anyway, and should not have to read
    /// back everything sent while it was away before it can catch up.
    pub bulk_queue: usize,
    /// Bytes of bulk frames queued for one peer before more are dropped.
    pub bulk_queue_bytes: usize,
    /// Bytes of one peer's frames waiting for the modules they were routed to; beyond
    /// it, that peer's frames are dropped (and counted) until the modules catch up.
    pub recv_queue_bytes: usize,
    /// A connection with nothing else to send sends a keepalive frame this often, so its
    /// peer can tell a quiet link from a dead one.
    pub keepalive_interval: Duration,
    /// A connection on which nothing arrives for this long is closed (and redialled):
    /// the link or the peer is dead. Longer than the peer's `keepalive_interval`.
    pub keepalive_timeout: Duration,
    /// Groups whose modules register only after the network has started (a validator's
    /// consensus channels, once its engine is built): until one of a group's modules
    /// registers, frames for the group are dropped without costing the peer points, since
    /// peers that already run it send them from the moment they connect.
    pub late_groups: Vec<i16>,
}

impl NetworkConfig {
    /// Defaults for a node listening on `listen` and dialling `peers`.
    pub fn new(listen: SocketAddr, peers: Vec<StaticPeer>) -> Self {
        Self {
            listen,
            peers,
            frame: FrameConfig::default(),
            score: ScoreConfig::default(),
            request_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            max_pending_handshakes: 256,
            max_pending_handshakes_per_ip: 16,
            backoff_min: Duration::from_millis(100),
            // Static peers are the few nodes of the chain's members, and a validator that
            // cannot reach enough of them cannot finalize: a link back up must be used at
            // once, not after a long back-off. A dial a second per unreachable peer
            // costs next to nothing.
            backoff_max: Duration::from_secs(1),
            send_queue: 1024,
            send_queue_bytes: 128 << 20,
            bulk_queue: 64,
            bulk_queue_bytes: 32 << 20,
            recv_queue_bytes: 128 << 20,
            keepalive_interval: Duration::from_secs(5),
            keepalive_timeout: Duration::from_secs(20),
            late_groups: Vec::new(),
        }
    }
}

/// Why a network operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The listening socket could not be opened.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// No connection to that peer.
    #[error("peer {} is not connected", short_id(.0))]
    NotConnected(NodeId),
    /// The peer's send queue is full (it reads too slowly).
    #[error("send queue of peer {} is full", short_id(.0))]
    QueueFull(NodeId),
    /// The peer did not answer in time.
    #[error("peer {} did not answer within {timeout:?}", short_id(.peer))]
    Timeout {
        /// The peer.
        peer: NodeId,
        /// The limit.
        timeout: Duration,
    },
    /// The connection closed before the answer came.
    #[error("peer {} disconnected before answering", short_id(.0))]
    Disconnected(NodeId),
    /// The frame could not be encoded (too large).
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// The first 4 bytes of a node id in hex: enough to tell peers apart in logs and metrics.
pub fn short_id(id: &NodeId) -> String {
    id[..4].iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A frame from a peer, for the module it was addressed to. It holds its share of the
/// peer's receive budget ([`NetworkConfig::recv_queue_bytes`]) until the module drops it
/// (and every clone).
#[derive(Debug, Clone)]
pub struct Inbound {
    /// Who sent it.
    pub peer: NodeId,
    /// The frame, payload decompressed.
    pub frame: Frame,
    _budget: Arc<tokio::sync::OwnedSemaphorePermit>,
}

struct Link {
    connection: u64,
    dialer: NodeId,
    outbound: Lane,
    /// Frames written only when `outbound` is empty (see [`Network::broadcast_bulk`]).
    bulk: Lane,
    closed: CancellationToken,
}

struct Shared {
    local: NodeId,
    tls: NodeTls,
    config: NetworkConfig,
    links: Mutex<HashMap<NodeId, Link>>,
    modules: Mutex<HashMap<ProtocolId, mpsc::Sender<Inbound>>>,
    pending: Mutex<HashMap<(NodeId, u32), oneshot::Sender<Frame>>>,
    scores: Mutex<PeerScores>,
    seq: AtomicU32,
    connections: AtomicU64,
    /// Each peer as its connection is established (see [`Network::connected_peers`]).
    connected: broadcast::Sender<NodeId>,
    shutdown: CancellationToken,
    /// The accept loop and the diallers, until handed out.
    tasks: Tasks,
}

/// A running peer manager; clones share it. Dropping every clone does not stop it: call
/// [`Network::shutdown`].
#[derive(Clone)]
pub struct Network {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("local", &short_id(&self.shared.local))
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Network {
    /// Listens on `config.listen` and starts dialling the static peers, as `local`
    /// (this node's id) with `tls`. Runs on the current tokio runtime.
    pub async fn start(
        config: NetworkConfig,
        tls: NodeTls,
        local: NodeId,
    ) -> Result<Network, NetError> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| NetError::Listen {
                    address: config.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| NetError::Listen {
            address: config.listen,
            source,
        })?;
        let peers = config.peers.clone();
        let shared = Arc::new(Shared {
            local,
            tls,
            scores: Mutex::new(PeerScores::new(config.score)),
            config,
            links: Mutex::default(),
            modules: Mutex::default(),
            pending: Mutex::default(),
            seq: AtomicU32::new(0),
            connections: AtomicU64::new(0),
            connected: broadcast::Sender::new(CONNECTED_BACKLOG),
            shutdown: CancellationToken::new(),
            tasks: Tasks::default(),
        });
        shared
            .tasks
            .spawn("P2P accept loop", accept_loop(shared.clone(), listener));
        for peer in peers {
            shared
                .tasks
                .spawn("P2P dialler", dial_loop(shared.clone(), peer));
        }
        Ok(Network { shared, local_addr })
    }

    /// The long-lived tasks it started and has not handed out yet (see [`Task`]), for a
    /// watcher: each runs until [`Network::shutdown`].
    pub fn take_tasks(&self) -> Vec<Task> {
        self.shared.tasks.take()
    }

    /// This node's id.
    pub fn local_id(&self) -> NodeId {
        self.shared.local
    }

    /// The address it listens on (with the port the OS chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The frame limits in force (for callers that encode frames themselves).
    pub fn frame_config(&self) -> &FrameConfig {
        &self.shared.config.frame
    }

    /// Routes requests and broadcasts for `module` of `group` to the returned channel,
    /// which buffers `backlog` frames; beyond that, frames are dropped (and counted).
    /// Registering a module again replaces the earlier channel.
    pub fn register(&self, group: i16, module: u16, backlog: usize) -> mpsc::Receiver<Inbound> {
        let (sender, receiver) = mpsc::channel(backlog.max(1));
        self.shared
            .modules
            .lock()
            .insert(ProtocolId::request(group, module), sender);
        receiver
    }

    /// Every peer whose connection is established from now on (a reconnection too), as
    /// it happens: what a module that greets new peers listens to. A receiver that falls
    /// more than 64 connections behind misses the oldest ([`broadcast`]'s lag).
    pub fn connected_peers(&self) -> broadcast::Receiver<NodeId> {
        self.shared.connected.subscribe()
    }

    /// The peers connected now.
    pub fn peers(&self) -> Vec<NodeId> {
        self.shared.links.lock().keys().copied().collect()
    }

    /// A frame with this node's version and a fresh seq.
    pub fn frame(&self, protocol_id: ProtocolId, packet_type: u16, payload: Bytes) -> Frame {
        Frame {
            version: VERSION,
            protocol_id,
            packet_type,
            seq: self.shared.seq.fetch_add(1, Ordering::Relaxed),
            payload,
        }
    }

    /// Sends `frame` to `peer`, waiting while its queue is full (in frames or bytes).
    pub async fn send(&self, peer: NodeId, frame: &Frame) -> Result<(), NetError> {
        self.send_on(peer, frame, |link| &link.outbound).await
    }

    /// As [`Network::send`], on `peer`'s bulk queue (see [`Network::broadcast_bulk`]): for
    /// much gossip to one peer, which then never holds up its votes or blocks.
    pub async fn send_bulk(&self, peer: NodeId, frame: &Frame) -> Result<(), NetError> {
        self.send_on(peer, frame, |link| &link.bulk).await
    }

    async fn send_on(
        &self,
        peer: NodeId,
        frame: &Frame,
        lane: fn(&Link) -> &Lane,
    ) -> Result<(), NetError> {
        let encoded = self.encode(frame)?;
        let outbound = self
            .shared
            .links
            .lock()
            .get(&peer)
            .map(|link| lane(link).clone())
            .ok_or(NetError::NotConnected(peer))?;
        outbound
            .push(encoded)
            .await
            .map_err(|_| NetError::NotConnected(peer))
    }

    /// Queues `frame` for `peer` without waiting: for callers that may not block (such as
    /// consensus's synchronous senders). Fails with [`NetError::QueueFull`] rather than wait.
    pub fn try_send(&self, peer: NodeId, frame: &Frame) -> Result<(), NetError> {
        let mut outcomes = self.try_send_each(&[peer], frame)?;
        outcomes.pop().unwrap_or(Err(NetError::NotConnected(peer)))
    }

    /// Queues `frame` for each of `peers` without waiting, encoding (and compressing) it
    /// once. The outer error is the frame's own (too large); the outcomes follow `peers`'
    /// order: queued, [`NetError::NotConnected`] or [`NetError::QueueFull`].
    pub fn try_send_each(
        &self,
        peers: &[NodeId],
        frame: &Frame,
    ) -> Result<Vec<Result<(), NetError>>, NetError> {
        let encoded = self.encode(frame)?;
        let outbound: Vec<Option<Lane>> = {
            let links = self.shared.links.lock();
            peers
                .iter()
                .map(|peer| links.get(peer).map(|link| link.outbound.clone()))
                .collect()
        };
        Ok(peers
            .iter()
            .zip(outbound)
            .map(|(peer, outbound)| {
                let outbound = outbound.ok_or(NetError::NotConnected(*peer))?;
                outbound
                    .try_push(encoded.clone())
                    .map_err(|refused| refusal(*peer, refused))
            })
            .collect())
    }

    /// Sends `frame` to every connected peer but `except`, encoding (and compressing) it
    /// once; a peer whose queue is full misses it. Returns how many peers it was queued for.
    pub fn broadcast(&self, frame: &Frame, except: Option<NodeId>) -> Result<usize, NetError> {
        self.broadcast_on(frame, except, |link| &link.outbound)
    }

    /// As [`Network::broadcast`], for bulk traffic (transaction gossip): each peer's bulk
    /// frames wait in a queue of their own, written only when nothing else is queued for
    /// it. Votes, blocks and answers to requests so never wait behind a backlog of
    /// gossip, as they would for a peer that stalled and is reading it all back.
    pub fn broadcast_bulk(&self, frame: &Frame, except: Option<NodeId>) -> Result<usize, NetError> {
        self.broadcast_on(frame, except, |link| &link.bulk)
    }

    fn broadcast_on(
        &self,
        frame: &Frame,
        except: Option<NodeId>,
        lane: fn(&Link) -> &Lane,
    ) -> Result<usize, NetError> {
        let encoded = self.encode(frame)?;
        let targets: Vec<(NodeId, Lane)> = self
            .shared
            .links
            .lock()
            .iter()
            .filter(|(id, _)| Some(**id) != except)
            .map(|(id, link)| (*id, lane(link).clone()))
            .collect();
        let mut queued = 0;
        for (peer, outbound) in targets {
            match outbound.try_push(encoded.clone()) {
                Ok(()) => queued += 1,
                Err(refused) => {
                    tracing::debug!(peer = %short_id(&peer), error = %refusal(peer, refused), "broadcast dropped");
                }
            }
        }
        Ok(queued)
    }

    /// Sends a request to `peer` and waits for its response's payload. A peer that does
    /// not answer in time is charged an [`Offence::Timeout`].
    pub async fn request(
        &self,
        peer: NodeId,
        protocol_id: ProtocolId,
        packet_type: u16,
        payload: Bytes,
    ) -> Result<Bytes, NetError> {
        let frame = self.frame(protocol_id, packet_type, payload);
        let (sender, receiver) = oneshot::channel();
        self.shared.pending.lock().insert((peer, frame.seq), sender);
        // However this ends (answered, failed, timed out, or the caller stopped waiting),
        // the response is no longer awaited.
        let _awaited = Awaited {
            shared: &self.shared,
            key: (peer, frame.seq),
        };
        self.send(peer, &frame).await?;
        let timeout = self.shared.config.request_timeout;
        match tokio::time::timeout(timeout, receiver).await {
            Ok(Ok(response)) => Ok(response.payload),
            Ok(Err(_)) => Err(NetError::Disconnected(peer)),
            Err(_) => {
                self.penalize(peer, Offence::Timeout);
                Err(NetError::Timeout { peer, timeout })
            }
        }
    }

    /// Answers `request` with `payload` (same module, packet type and seq), waiting while
    /// the asker's queue is full: a caller serving many peers bounds the wait (see
    /// `gossip`'s serving of blocks), since a peer that asks and never reads never
    /// makes room.
    pub async fn respond(&self, request: &Inbound, payload: Bytes) -> Result<(), NetError> {
        self.send(request.peer, &response(request, payload)).await
    }

    /// As [`Network::respond`], without waiting: fails with [`NetError::QueueFull`] if the
    /// asker's queue has no room now.
    pub fn try_respond(&self, request: &Inbound, payload: Bytes) -> Result<(), NetError> {
        self.try_send(request.peer, &response(request, payload))
    }

    /// Charges `peer` for `offence`; a peer whose score falls below the threshold is
    /// disconnected and refused until its ban ends.
    pub fn penalize(&self, peer: NodeId, offence: Offence) -> Verdict {
        self.shared.penalize(peer, offence)
    }

    /// `peer`'s score.
    pub fn score(&self, peer: &NodeId) -> i32 {
        self.shared.scores.lock().score(peer, Instant::now())
    }

    /// True while `peer` is banned.
    pub fn is_banned(&self, peer: &NodeId) -> bool {
        self.shared.scores.lock().is_banned(peer, Instant::now())
    }

    /// True once [`Network::shutdown`] was called: nothing will be sent or received again.
    pub fn is_shut_down(&self) -> bool {
        self.shared.shutdown.is_cancelled()
    }

    /// Makes `allowed` the allow-list (the chain's governance changed it): peers on it
    /// are admitted from now on, and the connections of those left off are closed at
    /// once; their handshakes are refused from then on. Returns how many were closed.
    pub fn set_allowed(&self, allowed: HashSet<NodeId>) -> usize {
        self.shared.tls.set_allowed(allowed);
        let mut links = self.shared.links.lock();
        let refused: Vec<NodeId> = links
            .keys()
            .filter(|id| !self.shared.tls.is_allowed(id))
            .copied()
            .collect();
        for id in &refused {
            if let Some(link) = links.remove(id) {
                tracing::info!(peer = %short_id(id), "peer no longer on the allow-list: disconnected");
                link.closed.cancel();
            }
        }
        metrics::gauge!("stave_net_peers").set(links.len() as f64);
        refused.len()
    }

    /// Stops listening and dialling and closes every connection.
    pub fn shutdown(&self) {
        self.shared.shutdown.cancel();
        for (_, link) in self.shared.links.lock().drain() {
            link.closed.cancel();
        }
    }

    fn encode(&self, frame: &Frame) -> Result<Bytes, NetError> {
        Ok(encode_frame(frame, &self.shared.config.frame)?)
    }
}

/// A request's place among the awaited responses, given up when dropped.
struct Awaited<'a> {
    shared: &'a Shared,
    key: (NodeId, u32),
}

impl Drop for Awaited<'_> {
    fn drop(&mut self) {
        self.shared.pending.lock().remove(&self.key);
    }
}

impl Shared {
    fn penalize(&self, peer: NodeId, offence: Offence) -> Verdict {
        let verdict = self.scores.lock().penalize(peer, offence, Instant::now());
        metrics::counter!("stave_net_offences_total", "offence" => format!("{offence:?}"))
            .increment(1);
        if let Verdict::Banned(_) = verdict {
            tracing::warn!(peer = %short_id(&peer), ?offence, "peer banned");
            if let Some(link) = self.links.lock().remove(&peer) {
                link.closed.cancel();
            }
        }
        verdict
    }

    /// Takes a connection whose handshake succeeded, unless the peer is banned, is this
    /// node, or already has the connection that wins the tie-break.
    fn admit(
        self: &Arc<Self>,
        stream: TlsStream<TcpStream>,
        peer: NodeId,
        dialer: NodeId,
    ) -> Option<CancellationToken> {
        // The allow-list is checked again: it may have changed during the handshake.
        if peer == self.local
            || !self.tls.is_allowed(&peer)
            || self.scores.lock().is_banned(&peer, Instant::now())
        {
            return None;
        }
        let (outbound, queue) = Lane::new(self.config.send_queue, self.config.send_queue_bytes);
        let (bulk, bulk_queue) = Lane::new(self.config.bulk_queue, self.config.bulk_queue_bytes);
        let closed = self.shutdown.child_token();
        let connection = self.connections.fetch_add(1, Ordering::Relaxed);
        {
            let mut links = self.links.lock();
            if let Some(existing) = links.get(&peer) {
                // The connection dialled by the smaller id wins; between two dialled by the
                // same node, the newer (the old one may be dead and not yet noticed). One that
                // has already ended wins nothing.
                if existing.dialer < dialer && !existing.closed.is_cancelled() {
                    return None;
                }
                existing.closed.cancel();
            }
            links.insert(
                peer,
                Link {
                    connection,
                    dialer,
                    outbound,
                    bulk,
                    closed: closed.clone(),
                },
            );
            metrics::gauge!("stave_net_peers").set(links.len() as f64);
        }
        tracing::info!(peer = %short_id(&peer), "peer connected");
        // Nobody listening is fine: the events are for whoever subscribed.
        let _ = self.connected.send(peer);
        let (reader, writer) = tokio::io::split(stream);
        tokio::spawn(write_loop(
            writer,
            (queue, bulk_queue),
            peer,
            self.config.keepalive_interval,
            closed.clone(),
        ));
        tokio::spawn(read_loop(
            self.clone(),
            reader,
            peer,
            connection,
            closed.clone(),
        ));
        Some(closed)
    }

    /// Forgets connection `connection` of `peer` (if it is still the current one) and fails
    /// the requests waiting on it.
    fn forget(&self, peer: NodeId, connection: u64) {
        let mut links = self.links.lock();
        if links
            .get(&peer)
            .is_some_and(|link| link.connection == connection)
        {
            links.remove(&peer);
            metrics::gauge!("stave_net_peers").set(links.len() as f64);
            drop(links);
            self.pending
                .lock()
                .retain(|(waiting_on, _), _| *waiting_on != peer);
            tracing::info!(peer = %short_id(&peer), "peer disconnected");
        }
    }

    /// True for a late group (see [`NetworkConfig::late_groups`]) none of whose modules
    /// has registered yet.
    fn awaits_modules(&self, group: i16) -> bool {
        self.config.late_groups.contains(&group)
            && !self.modules.lock().keys().any(|id| id.group() == group)
    }

    /// Hands `frame` to the request waiting for it, or to its module within `budget`.
    fn route(&self, peer: NodeId, frame: Frame, budget: &Budget) {
        if frame.protocol_id.is_response() {
            let waiting = self.pending.lock().remove(&(peer, frame.seq));
            // A late or unsolicited response is dropped: the request already timed out.
            if let Some(waiting) = waiting {
                let _ = waiting.send(frame);
            }
            return;
        }
        let module = self.modules.lock().get(&frame.protocol_id).cloned();
        match module {
            Some(module) => {
                let Ok(permit) = budget.try_take(frame.payload.len()) else {
                    metrics::counter!("stave_net_dropped_frames_total", "reason" => "peer_budget")
                        .increment(1);
                    return;
                };
                let inbound = Inbound {
                    peer,
                    frame,
                    _budget: Arc::new(permit),
                };
                if module.try_send(inbound).is_err() {
                    metrics::counter!("stave_net_dropped_frames_total", "reason" => "backlog")
                        .increment(1);
                }
            }
            None if self.awaits_modules(frame.protocol_id.group()) => {
                metrics::counter!("stave_net_dropped_frames_total", "reason" => "not_registered_yet")
                    .increment(1);
            }
            None => {
                self.penalize(peer, Offence::UnknownModule);
            }
        }
    }
}

/// The answer to `request` carrying `payload`: same module, packet type and seq.
fn response(request: &Inbound, payload: Bytes) -> Frame {
    Frame {
        version: VERSION,
        protocol_id: request.frame.protocol_id.response(),
        packet_type: request.frame.packet_type,
        seq: request.frame.seq,
        payload,
    }
}

/// The error for a frame `peer`'s lane refused, counting a drop for a full queue.
fn refusal(peer: NodeId, refused: Refused) -> NetError {
    match refused {
        Refused::Full => {
            metrics::counter!("stave_net_dropped_frames_total", "reason" => "queue_full")
                .increment(1);
            NetError::QueueFull(peer)
        }
        Refused::Closed => NetError::NotConnected(peer),
    }
}

/// Connection events a [`Network::connected_peers`] receiver may fall behind by.
const CONNECTED_BACKLOG: usize = 64;

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::{ChainCa, NodeTls};

    /// Polls `done` every 10 ms for up to 15 s; an error naming `what` if it never holds.
    async fn eventually(what: &str, done: impl Fn() -> bool) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !done() {
            if Instant::now() > deadline {
                return Err(format!("timed out waiting for {what}"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// A dialled connection ends, but its link stays in the map: its read loop has not run
    /// yet (here: never will, the link names another connection). The dial loop must not
    /// wait on the ended link's token again, which returns at once and would spin a worker
    /// forever; it redials, and the new connection replaces the ended link.
    #[test]
    fn a_link_that_ended_but_is_not_yet_forgotten_is_redialled_not_spun_on() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let outcome =
            runtime.block_on(async {
                let ca = ChainCa::generate("stave test chain").expect("ca");
                let names = ["node0.stave", "node1.stave"];
                let identities: Vec<_> = names
                    .iter()
                    .map(|name| ca.issue(name).expect("certificate"))
                    .collect();
                let ids: Vec<NodeId> = identities
                    .iter()
                    .map(|identity| identity.node_id().expect("id"))
                    .collect();
                let allowed: HashSet<NodeId> = ids.iter().copied().collect();
                let start = |i: usize, peers: Vec<StaticPeer>| {
                    let tls = NodeTls::new(&ca.certificate(), &identities[i], allowed.clone());
                    let mut config =
                        NetworkConfig::new("127.0.0.1:0".parse().expect("address"), peers);
                    config.backoff_min = Duration::from_millis(20);
                    config.backoff_max = Duration::from_millis(200);
                    Network::start(config, tls.expect("tls"), ids[i])
                };
                let server = start(0, vec![]).await.expect("starts");
                let peer = StaticPeer {
                    name: names[0].to_string(),
                    address: server.local_addr(),
                };
                let client = start(1, vec![peer]).await.expect("starts");
                eventually("the first connection", || client.peers() == vec![ids[0]]).await?;

                {
                    let mut links = client.shared.links.lock();
                    let link = links.get_mut(&ids[0]).expect("linked");
                    link.connection = u64::MAX;
                    link.closed.cancel();
                }
                eventually("a new connection in place of the ended link", || {
                    client.shared.links.lock().get(&ids[0]).is_some_and(|link| {
                        link.connection != u64::MAX && !link.closed.is_cancelled()
                    })
                })
                .await?;
                eventually("the server to see the new connection", || {
                    server.peers() == vec![ids[1]]
                })
                .await?;
                client.shutdown();
                server.shutdown();
                Ok::<_, String>(())
            });
        // Not waiting for the tasks: a dial loop that spins would never let the runtime
        // shut down, and the test would hang instead of failing.
        runtime.shutdown_background();
        outcome.expect("the dialler reconnects");
    }
}
